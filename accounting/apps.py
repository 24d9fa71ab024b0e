from django.apps import AppConfig


class AccountingConfig(AppConfig):
    name = "accounting"
    verbose_name = "Usage, prices and chargeback"

    def ready(self) -> None:
        """Budgets shape new work through scheduling's submission hook (see budgets.py)."""
        from accounting.services.budgets import adjust_submission
        from scheduling.services.requests import gpu_request_submitting

        gpu_request_submitting.connect(adjust_submission, dispatch_uid="accounting.budgets")
