"""The in-app inbox: deliver a notification to each recipient, mark them read, count the unread.

Events are announced where they happen (`scheduling.services.notifications.notify`, which
also picks the recipients whose settings want the inbox); this module only stores and reads
them. A notification belongs to its recipient alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from tenants.models import Notification


@dataclass(frozen=True, slots=True)
class Notice:
    """One message for some users, before it becomes a notification per recipient."""

    users: Sequence[Any]
    kind: str
    event_type: str
    subject: str
    body: str
    url: str = ""


def deliver_notices(*, notices: Iterable[Notice]) -> list[Notification]:
    """Each notice to each of its distinct recipients, all inserted in one statement."""
    rows = [
        Notification(
            recipient=user,
            kind=notice.kind,
            event_type=notice.event_type[:60],
            subject=notice.subject[:200],
            body=notice.body,
            url=notice.url,
        )
        for notice in notices
        for user in {user.pk: user for user in notice.users if getattr(user, "pk", None)}.values()
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


def mark_notifications_read_for_all(*, event_type: str, url: str) -> int:
    """Mark read, whoever received them, the unread notifications of one event and link: what
    they asked of their recipients is settled. Returns how many."""
    unread = Notification.objects.filter(event_type=event_type, url=url, read_at__isnull=True)
    return unread.update(read_at=timezone.now())


def unread_notification_count(*, user: Any) -> int:
    """How many notifications the user has not read yet (the badge in the navigation)."""
    return Notification.objects.visible_to(user).filter(read_at__isnull=True).count()
