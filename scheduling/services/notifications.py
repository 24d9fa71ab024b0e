"""Telling owners and leads what happened: in the portal's inbox, by email, on their own
webhook, each as the recipient's notification settings say; and to the organisation's webhooks.

Every event type belongs to one topic (`topic_of_event`); a recipient hears a notice on a
channel when their settings have its topic on that channel (`NotificationPreferences`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.conf import settings
from django.urls import reverse

from scheduling import dispatch
from scheduling.choices import RequestStatus
from scheduling.models import GpuRequest
from tenants.choices import NotificationChannel, NotificationKind, NotificationTopic
from tenants.selectors import NotificationPreferences, active_webhook_ids, notification_preferences
from tenants.services.notifications import (
    Notice,
    deliver_notices,
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
# Event types by the topic a user switches on or off; `topic_of_event` adds the families.
TOPIC_OF_EVENT = {
    "request.pending_approval": NotificationTopic.APPROVAL_NEEDED,
    "request.asked_extension": NotificationTopic.APPROVAL_NEEDED,
    "request.asked_idle_exemption": NotificationTopic.APPROVAL_NEEDED,
    "request.approved": NotificationTopic.DECIDED,
    "request.rejected": NotificationTopic.DECIDED,
    "request.expired": NotificationTopic.DECIDED,
    "request.approval_deferred": NotificationTopic.DECIDED,
    "request.extended": NotificationTopic.DECIDED,
    "request.idle_exemption": NotificationTopic.DECIDED,
    "request.running": NotificationTopic.STARTED,
    "request.succeeded": NotificationTopic.FINISHED,
    "request.failed": NotificationTopic.FINISHED,
    "request.preempted": NotificationTopic.PREEMPTED,
    "request.preempted_final": NotificationTopic.PREEMPTED,
}
APPROVAL_ASKED = "request.pending_approval"
# Events that ask a lead to decide: their notification opens the approvals inbox.
LEAD_DECISIONS = {
    APPROVAL_ASKED,
    "request.asked_extension",
    "request.asked_idle_exemption",
}


def topic_of_event(event_type: str) -> str:
    """The topic a notice of `event_type` is filed under in the recipients' settings."""
    if event_type in TOPIC_OF_EVENT:
        return TOPIC_OF_EVENT[event_type]
    if event_type.startswith("reclaim."):
        return NotificationTopic.RECLAIMED
    if event_type.startswith("budget."):
        return NotificationTopic.BUDGET
    return NotificationTopic.OTHER


def notify(*, users: Iterable[Any], subject: str, body: str, event: dict[str, Any]) -> None:
    """Tell `users`, each as their settings say: an inbox notification now (in the caller's
    transaction), then the email and the webhook messages, queued after the commit by one
    task (`send_out`); never fails the caller."""
    notify_each([(list(users), subject, body, event)])


def notify_each(messages: Sequence[tuple[Sequence[Any], str, str, dict[str, Any]]]) -> None:
    """`notify` for many messages at once, (users, subject, body, event) each: the recipients'
    settings in one query, their inbox notifications in one statement, whatever their number;
    their email and webhook messages in one task after the commit."""
    if not messages:
        return
    preferences = notification_preferences(
        user_ids=[user.pk for users, *_ in messages for user in users if getattr(user, "pk", None)]
    )
    deliver_notices(
        notices=[
            Notice(
                users=_wanting(users, preferences, NotificationChannel.IN_APP, event),
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
        [
            _outgoing(users, preferences, subject, body, event)
            for users, subject, body, event in messages
        ]
    )


def _wanting(
    users: Sequence[Any],
    preferences: dict[int, NotificationPreferences],
    channel: str,
    event: dict[str, Any],
) -> list[Any]:
    """Those of `users` whose settings have the event's topic on `channel`."""
    topic = topic_of_event(str(event.get("type", "")))
    return [
        user
        for user in users
        if getattr(user, "pk", None) and preferences[user.pk].wants(channel, topic)
    ]


def _outgoing(
    users: Sequence[Any],
    preferences: dict[int, NotificationPreferences],
    subject: str,
    body: str,
    event: dict[str, Any],
) -> dict[str, Any]:
    """What the email and the webhooks of one notice need, as the task's message carries it:
    the addresses of those who want it by email, the ids of those who want it on their webhook
    (their URLs are read by the task that posts: they never travel the broker)."""
    link = _link(event)
    emailed = _wanting(users, preferences, NotificationChannel.EMAIL, event)
    hooked = _wanting(users, preferences, NotificationChannel.WEBHOOK, event)
    return {
        "recipients": sorted({user.email for user in emailed if getattr(user, "email", "")}),
        "webhook_users": sorted({user.pk for user in hooked}),
        "subject": subject,
        "body": body,
        "link": f"{settings.PORTAL_URL}{link}" if settings.PORTAL_URL and link else "",
        "event": event,
    }


def send_out(*, notices: Sequence[dict[str, Any]]) -> int:
    """After the commit, in a worker: queue each notice's email (when someone wants it and has
    an address), one message per recipient's own webhook, and one per organisation webhook:
    every active one and the NOTIFICATION_WEBHOOK_URL setting's (None). A task each, so a
    receiver that fails is retried (or, a user's own, reported) alone. How many were queued."""
    webhooks: list[int | None] = [*active_webhook_ids()]
    if settings.NOTIFICATION_WEBHOOK_URL:
        webhooks.append(None)
    queued = 0
    for notice in notices:
        subject, body, event = notice["subject"], notice["body"], notice["event"]
        if notice["recipients"]:
            dispatch.send_notification(notice["recipients"], subject, body, event)
            queued += 1
        for user_id in notice.get("webhook_users", []):
            dispatch.send_personal_webhook(user_id, subject, body, notice["link"], event)
            queued += 1
        for webhook_id in webhooks:
            dispatch.send_webhook(webhook_id, subject, body, notice["link"], event)
            queued += 1
    return queued


def announce_start(request: GpuRequest) -> None:
    """Tell the owner that their work is running (a notice most want in the portal only)."""
    notify(
        users=[request.owner],
        subject=f"GPU request {request.label} started",
        body="",
        event={"type": "request.running", "request": request.pk},
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
