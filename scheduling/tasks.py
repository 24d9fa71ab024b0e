"""Thin Celery tasks of the scheduling floor: take ids, call one service, safe to run twice.

The cycle's follow-up work (launches, terminations) is queued by name through
`scheduling.dispatch`, so this module never imports the runtime's tasks.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from django.conf import settings
from django.core.mail import send_mail

from scheduling import dispatch
from scheduling.services import cycle, estimates, notifications, requests

log = logging.getLogger(__name__)


@shared_task(acks_late=True, autoretry_for=(OSError,), retry_backoff=True, max_retries=5)
def send_notification(
    recipients: list[str], subject: str, body: str, event: dict[str, Any]
) -> None:
    """The notice's email, through the configured backend (EMAIL_URL or EMAIL_BACKEND)."""
    if recipients:
        send_mail(subject, body, settings.DEFAULT_FROM_EMAIL, recipients)


@shared_task(acks_late=True)
def send_notices(notices: list[dict[str, Any]]) -> int:
    """The email and webhook messages of notices committed together, queued a task each."""
    return notifications.send_out(notices=notices)


@shared_task(acks_late=True)
def expire_stale_approvals() -> int:
    return requests.expire_stale_approvals()


@shared_task(acks_late=True)
def approve_deferred_requests() -> int:
    """Approve the requests leads approved to run when quota frees, once it has."""
    return requests.approve_deferred_requests()


@shared_task(acks_late=True, soft_time_limit=50, time_limit=60)
def run_scheduling_cycle() -> dict[str, Any]:
    """One cycle; a second one started while the first runs exits at once, and the first then
    queues one more cycle if anything asked for one while it ran (`dispatch`: cycle pending)."""
    result = cycle.run_cycle(
        on_start=dispatch.clear_pending_cycle,
        on_admit=dispatch.send_launch,
        on_preempt=dispatch.send_preemption,
    )
    if result.ran and dispatch.is_cycle_pending():
        dispatch.send(dispatch.RUN_SCHEDULING_CYCLE)
    if result.ran:
        dispatch.send_start_estimates()
    return {
        "ran": result.ran,
        "admitted": len(result.admitted),
        "preempted": len(result.preempted),
        "waiting": result.waiting,
        "seconds": round(result.seconds, 4),
    }


@shared_task(acks_late=True, soft_time_limit=50, time_limit=60)
def refresh_start_estimates() -> int:
    """Estimated starts of the queue (scheduling/services/estimates.py); queued after cycles,
    throttled."""
    return estimates.refresh_start_estimates()
