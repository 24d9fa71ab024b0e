"""Thin Celery tasks for accounting; safe to run twice."""

from __future__ import annotations

from celery import shared_task

from accounting.services.budgets import check_budget_burn
from accounting.services.metering import meter_usage


@shared_task(acks_late=True, soft_time_limit=50, time_limit=55)
def meter_usage_task() -> int:
    """Bring the usage ledger and rollups up to now (beat, every minute)."""
    return meter_usage()


@shared_task(acks_late=True, soft_time_limit=50, time_limit=55)
def check_budgets_task() -> int:
    """Fire the budget alerts that came due (beat, every few minutes); once per month each."""
    return check_budget_burn()
