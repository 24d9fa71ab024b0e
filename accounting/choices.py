"""The fixed vocabularies of budgets and statements."""

from __future__ import annotations

from django.db import models


class BudgetUnit(models.TextChoices):
    GPU_HOURS = "gpu_hours", "GPU-equivalent hours"
    MONEY = "money", "Money (portal currency)"


class OverBudgetPolicy(models.TextChoices):
    """What happens to new work of a team once one of its budgets is used up this month."""

    NOTIFY = "notify", "Notify only"
    PREEMPTIBLE_ONLY = "preemptible_only", "New work only as preemptible"
    APPROVAL = "approval", "New work needs lead approval"


# Stricter policies win when several budgets are past 100 % at once.
POLICY_STRICTNESS: dict[str, int] = {
    OverBudgetPolicy.NOTIFY: 0,
    OverBudgetPolicy.PREEMPTIBLE_ONLY: 1,
    OverBudgetPolicy.APPROVAL: 2,
}

ALERT_THRESHOLDS_PERCENT: tuple[int, ...] = (80, 100)


class HostResource(models.TextChoices):
    """What is priced beside GPUs, each per unit and hour (docs/accounting.md)."""

    CPU = "cpu", "CPU (per core-hour)"
    MEMORY = "memory", "Memory (per GiB-hour)"
    STORAGE = "storage", "Storage (per GiB-hour of claimed volume)"
