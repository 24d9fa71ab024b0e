"""Counting Celery task failures where the web tier's /metrics can read them."""

from __future__ import annotations

import logging
from typing import Any

from django.db.models import F
from django.utils import timezone

log = logging.getLogger(__name__)


def record_task_failure(
    sender: Any = None, exception: BaseException | None = None, **_: Any
) -> None:
    from runtime.models import TaskFailureCount  # the app registry is ready at failure time

    name = getattr(sender, "name", str(sender))
    try:
        TaskFailureCount.objects.get_or_create(task_name=name)
        TaskFailureCount.objects.filter(task_name=name).update(
            failures=F("failures") + 1,
            last_failed_at=timezone.now(),
            last_error=repr(exception)[:2000],
        )
    except Exception:  # counting must never hide the original failure
        log.exception("could not count the failure of %s", name)
