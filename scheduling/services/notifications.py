"""Telling owners and leads what happened: in the portal's inbox, by email, by a webhook."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.urls import reverse

from scheduling import dispatch
from tenants.choices import NotificationKind
from tenants.selectors import active_webhook_ids
from tenants.services.notifications import deliver_notifications

# Event types by the inbox kind they show as; any other type is a request update.
KIND_OF_EVENT = {
    "request.pending_approval": NotificationKind.APPROVAL,
    "request.approved": NotificationKind.APPROVAL,
    "request.rejected": NotificationKind.APPROVAL,
    "request.asked_extension": NotificationKind.APPROVAL,
    "request.asked_idle_exemption": NotificationKind.APPROVAL,
    "reclaim.idle_warning": NotificationKind.WARNING,
    "reclaim.timeout_warning": NotificationKind.WARNING,
    "budget.alert": NotificationKind.BUDGET,
}
# Events that ask a lead to decide: their notification opens the approvals inbox.
LEAD_DECISIONS = {
    "request.pending_approval",
    "request.asked_extension",
    "request.asked_idle_exemption",
}


def notify(*, users: Iterable[Any], subject: str, body: str, event: dict[str, Any]) -> None:
    """Tell `users`: an inbox notification now (in the caller's transaction), then the email
    and one message per webhook queued to go out after the commit; never fails the caller.

    No email is queued when there is no one to email; every active webhook (and the one of the
    NOTIFICATION_WEBHOOK_URL setting) hears every notice.
    """
    users = list(users)
    event_type = str(event.get("type", ""))
    link = _link(event)
    deliver_notifications(
        users=users,
        kind=KIND_OF_EVENT.get(event_type, NotificationKind.UPDATE),
        event_type=event_type,
        subject=subject,
        body=body,
        url=link,
    )
    recipients = sorted({user.email for user in users if getattr(user, "email", "")})
    if recipients:
        dispatch.request_notification(recipients, subject, body, event)
    webhooks: list[int | None] = [*active_webhook_ids()]
    if settings.NOTIFICATION_WEBHOOK_URL:
        webhooks.append(None)
    absolute_link = f"{settings.PORTAL_URL}{link}" if settings.PORTAL_URL and link else ""
    for webhook_id in webhooks:
        dispatch.request_webhook(webhook_id, subject, body, absolute_link, event)


def _link(event: dict[str, Any]) -> str:
    """The portal page a notification opens: the decision, the request or the budgets."""
    if event.get("type") in LEAD_DECISIONS:
        return reverse("approvals-page")
    if event.get("request"):
        return reverse("gpu-request-page", kwargs={"pk": event["request"]})
    if event.get("budget"):
        return reverse("budgets-page")
    return ""
