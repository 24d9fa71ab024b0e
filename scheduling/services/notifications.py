"""Telling owners and leads what happened: in the portal's inbox, by email, by a webhook."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.conf import settings
from django.urls import reverse

from scheduling import dispatch
from scheduling.choices import RequestStatus
from scheduling.models import GpuRequest
from tenants.choices import NotificationKind
from tenants.selectors import active_webhook_ids
from tenants.services.notifications import (
    Notice,
    deliver_notices,
    deliver_notifications,
    mark_notifications_read_for_all,
)

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
APPROVAL_ASKED = "request.pending_approval"
# Events that ask a lead to decide: their notification opens the approvals inbox.
LEAD_DECISIONS = {
    APPROVAL_ASKED,
    "request.asked_extension",
    "request.asked_idle_exemption",
}


def notify(*, users: Iterable[Any], subject: str, body: str, event: dict[str, Any]) -> None:
    """Tell `users`: an inbox notification now (in the caller's transaction), then the email
    and one message per webhook, queued after the commit by one task (`send_out`); never fails
    the caller.

    No email is queued when there is no one to email; every active webhook (and the one of the
    NOTIFICATION_WEBHOOK_URL setting) hears every notice.
    """
    users = list(users)
    event_type = str(event.get("type", ""))
    deliver_notifications(
        users=users,
        kind=KIND_OF_EVENT.get(event_type, NotificationKind.UPDATE),
        event_type=event_type,
        subject=subject,
        body=body,
        url=_link(event),
    )
    dispatch.request_notices([_outgoing(users, subject, body, event)])


def _outgoing(
    users: Sequence[Any], subject: str, body: str, event: dict[str, Any]
) -> dict[str, Any]:
    """What the email and the webhooks of one notice need, as the task's message carries it."""
    link = _link(event)
    return {
        "recipients": sorted({user.email for user in users if getattr(user, "email", "")}),
        "subject": subject,
        "body": body,
        "link": f"{settings.PORTAL_URL}{link}" if settings.PORTAL_URL and link else "",
        "event": event,
    }


def send_out(*, notices: Sequence[dict[str, Any]]) -> int:
    """After the commit, in a worker: queue each notice's email (when someone has an address)
    and one message per webhook: every active one and the NOTIFICATION_WEBHOOK_URL setting's
    (None). A task each, so a receiver that fails is retried alone. How many were queued."""
    webhooks: list[int | None] = [*active_webhook_ids()]
    if settings.NOTIFICATION_WEBHOOK_URL:
        webhooks.append(None)
    queued = 0
    for notice in notices:
        subject, body, event = notice["subject"], notice["body"], notice["event"]
        if notice["recipients"]:
            dispatch.send_notification(notice["recipients"], subject, body, event)
            queued += 1
        for webhook_id in webhooks:
            dispatch.send_webhook(webhook_id, subject, body, notice["link"], event)
            queued += 1
    return queued


def notify_each(messages: Sequence[tuple[Sequence[Any], str, str, dict[str, Any]]]) -> None:
    """`notify` for many messages at once, (users, subject, body, event) each: their inbox
    notifications in one statement, whatever their number; their email and webhook messages
    in one task after the commit."""
    if not messages:
        return
    deliver_notices(
        notices=[
            Notice(
                users=users,
                kind=KIND_OF_EVENT.get(str(event.get("type", "")), NotificationKind.UPDATE),
                event_type=str(event.get("type", "")),
                subject=subject,
                body=body,
                url=_link(event),
            )
            for users, subject, body, event in messages
        ]
    )
    dispatch.request_notices(
        [_outgoing(users, subject, body, event) for users, subject, body, event in messages]
    )


def announce_finish(request: GpuRequest) -> None:
    """Tell the owner that their work ended on its own: it finished, or it failed and why."""
    word = "finished" if request.status == RequestStatus.SUCCEEDED else request.status
    notify(
        users=[request.owner],
        subject=f"GPU request {request.label} {word}",
        body=request.status_reason,
        event={"type": f"request.{request.status}", "request": request.pk},
    )


def settle_approval_notices(*, request_id: int) -> int:
    """The request was decided (approved, rejected, cancelled, expired), by anyone: every lead's
    "needs your approval" notice of it is marked read. How many were."""
    return mark_notifications_read_for_all(
        event_type=APPROVAL_ASKED, url=approval_link(request_id=request_id)
    )


def approval_link(*, request_id: int) -> str:
    """The request's row in the approvals inbox."""
    return f"{reverse('approvals-page')}#inbox-approval-{request_id}"


def _link(event: dict[str, Any]) -> str:
    """The portal page a notification opens: the decision, the request or the budgets."""
    if event.get("type") == APPROVAL_ASKED and event.get("request"):
        return approval_link(request_id=int(event["request"]))
    if event.get("type") in LEAD_DECISIONS:
        return reverse("approvals-page")
    if event.get("request"):
        return reverse("gpu-request-page", kwargs={"pk": event["request"]})
    if event.get("budget"):
        return reverse("budgets-page")
    return ""
