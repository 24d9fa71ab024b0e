"""Counting Celery task failures where the web tier's /metrics can read them, and renewing the
version stamps of cached request pages when requests change."""

from __future__ import annotations

import logging
from typing import Any

from django.db.models import F
from django.utils import timezone

from tenants import data_versions

log = logging.getLogger(__name__)


def record_task_failure(
    sender: Any = None, exception: BaseException | None = None, **_: Any
) -> None:
    from scheduling.models import TaskFailureCount  # the app registry is ready at failure time

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


def renew_request_stamps(sender: Any, instance: Any, **_: Any) -> None:
    """A request saved or deleted: cached request pages of its team are out of date."""
    from scheduling.models import REQUESTS_DATA

    data_versions.changed(REQUESTS_DATA, [instance.team_id])


def renew_request_stamps_of_renamed_owner(
    sender: Any, instance: Any, update_fields: Any = None, **_: Any
) -> None:
    """Request pages show the owner's username; signing in only touches `last_login`."""
    from scheduling.models import REQUESTS_DATA
    from tenants.models import Membership
    from tenants.signals import records_sign_in_only

    if records_sign_in_only(update_fields):
        return

    teams = Membership.objects.filter(user_id=instance.pk).values_list("team_id", flat=True)
    data_versions.changed(REQUESTS_DATA, list(teams))
