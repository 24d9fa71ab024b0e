from django.apps import AppConfig
from django.core.exceptions import ImproperlyConfigured


class RuntimeConfig(AppConfig):
    name = "runtime"
    verbose_name = "Workloads on the cluster: launch, sync, inventory, monitoring, reclaim"

    def ready(self) -> None:
        from celery.signals import task_failure, worker_init
        from django.core import checks

        from runtime.checks import check_workload_origin, configured_problems
        from runtime.signals import (
            load_cluster_client,
            prepare_saved_project,
            record_task_failure,
        )
        from tenants.services.organisation import project_saved

        task_failure.connect(record_task_failure, weak=False)
        worker_init.connect(load_cluster_client, weak=False)
        project_saved.connect(prepare_saved_project, dispatch_uid="runtime.prepare_project")
        checks.register(check_workload_origin, checks.Tags.security)
        # Every process refuses to start with workloads on the portal's site (web, worker, beat).
        problems = configured_problems()
        if problems:
            raise ImproperlyConfigured("; ".join(problems))
