from django.apps import AppConfig


class SchedulingConfig(AppConfig):
    name = "scheduling"
    verbose_name = "GPU requests, pools and scheduling"

    def ready(self) -> None:
        from celery.signals import task_failure

        from scheduling.signals import record_task_failure

        task_failure.connect(record_task_failure, weak=False)
