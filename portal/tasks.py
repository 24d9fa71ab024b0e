"""The demo's periodic task: one step of its simulated people (`portal.demo_traffic`)."""

from __future__ import annotations

from celery import shared_task

from portal.demo_traffic import traffic_step


@shared_task(acks_late=True, soft_time_limit=50, time_limit=60)
def demo_traffic_step() -> dict[str, int]:
    """Safe to run twice: a second step finds the habits at their counts and does nothing."""
    return dict(traffic_step())
