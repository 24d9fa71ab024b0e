"""The in-app inbox: deliver a notification to each recipient, mark them read, count the unread.

Events are announced where they happen (`scheduling.services.notifications.notify`); this module
only stores and reads them. A notification belongs to its recipient alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.utils import timezone

from tenants.models import Notification


def deliver_notifications(
    *, users: Iterable[Any], kind: str, event_type: str, subject: str, body: str, url: str = ""
) -> list[Notification]:
    """One unread notification per distinct recipient, inserted in one statement."""
    recipients = {user.pk: user for user in users if getattr(user, "pk", None)}
    rows = [
        Notification(
            recipient=user,
            kind=kind,
            event_type=event_type[:60],
            subject=subject[:200],
            body=body,
            url=url,
        )
        for user in recipients.values()
    ]
    return Notification.objects.bulk_create(rows)


def mark_notifications_read(*, user: Any, ids: Iterable[int] | None = None) -> int:
    """Mark the user's unread notifications read (only `ids` if given); returns how many.

    A second run changes nothing: only unread rows are updated.
    """
    unread = Notification.objects.visible_to(user).filter(read_at__isnull=True)
    if ids is not None:
        unread = unread.filter(pk__in=list(ids))
    return unread.update(read_at=timezone.now())


def unread_notification_count(*, user: Any) -> int:
    """How many notifications the user has not read yet (the badge in the navigation)."""
    return Notification.objects.visible_to(user).filter(read_at__isnull=True).count()
