from django.apps import AppConfig


class RuntimeConfig(AppConfig):
    name = "runtime"
    verbose_name = "Workloads on the cluster: launch, sync, inventory, monitoring, reclaim"

    def ready(self) -> None:
        from celery.signals import task_failure

        from runtime.signals import record_task_failure

        task_failure.connect(record_task_failure, weak=False)
