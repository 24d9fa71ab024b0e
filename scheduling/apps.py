from django.apps import AppConfig


class SchedulingConfig(AppConfig):
    name = "scheduling"
    verbose_name = "GPU requests, pools and scheduling"

    def ready(self) -> None:
        from celery.signals import task_failure
        from django.contrib.auth import get_user_model
        from django.db.models.signals import post_delete, post_save

        from scheduling.models import GpuRequest
        from scheduling.signals import (
            record_task_failure,
            renew_request_stamps,
            renew_request_stamps_of_renamed_owner,
        )

        task_failure.connect(record_task_failure, weak=False)
        post_save.connect(renew_request_stamps, sender=GpuRequest, weak=False)
        post_delete.connect(renew_request_stamps, sender=GpuRequest, weak=False)
        post_save.connect(
            renew_request_stamps_of_renamed_owner, sender=get_user_model(), weak=False
        )
