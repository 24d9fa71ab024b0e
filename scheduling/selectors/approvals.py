"""Reads for a lead's decisions: a team's leads, the requests awaiting approval, owners' asks
that no lead answered yet, and approvals deferred until quota frees."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import QuerySet

from scheduling.choices import RequestStatus
from scheduling.models import GpuRequest
from tenants.choices import Role
from tenants.models import AuditEvent, Team, scope_of


def team_leads(*, team: Team) -> list[Any]:
    """The active leads of a team: whom approvals and asks are sent to."""
    return list(
        get_user_model().objects.filter(
            memberships__team=team, memberships__role=Role.TEAM_LEAD, is_active=True
        )
    )


def approval_inbox(*, user: Any) -> QuerySet[GpuRequest]:
    """Requests waiting for this user's decision: their teams' pending ones (all, for admins)."""
    scope = scope_of(user)
    pending = GpuRequest.objects.filter(status=RequestStatus.PENDING_APPROVAL)
    if not scope.is_platform_admin:
        pending = pending.filter(team_id__in=scope.lead_team_ids)
    return pending.select_related("owner", "project", "flavor", "team").order_by("created_at")


ASK_ACTIONS = {
    "request.asked_extension": "extension",
    "request.asked_idle_exemption": "idle_exemption",
}
GRANT_ACTIONS = {"request.extended": "extension", "request.idle_exemption": "idle_exemption"}
DEFERRED_APPROVAL_ACTION = "request.approval_deferred"


@dataclass(frozen=True, slots=True)
class OpenAsk:
    """An owner's ask for a longer runtime or an idle exemption that no lead answered yet."""

    request: GpuRequest
    about: str  # "extension" or "idle_exemption"
    reason: str
    asked_at: datetime
    asked_by: Any


def open_asks(*, user: Any) -> list[OpenAsk]:
    """Asks on the live work of the user's teams (every team, for admins) still unanswered:
    the latest ask of each kind per request, if no grant of that kind came after it."""
    scope = scope_of(user)
    events = AuditEvent.objects.filter(
        target_type="GpuRequest", action__in=[*ASK_ACTIONS, *GRANT_ACTIONS]
    )
    if not scope.is_platform_admin:
        events = events.filter(team_id__in=scope.lead_team_ids)
    live = GpuRequest.objects.filter(
        status__in=(RequestStatus.RUNNING, RequestStatus.LAUNCHING)
    ).values_list("pk", flat=True)
    events = events.filter(target_id__in=[str(pk) for pk in live])
    latest_ask: dict[tuple[str, str], Any] = {}
    latest_grant: dict[tuple[str, str], datetime] = {}
    for event in events.select_related("actor").order_by("occurred_at", "id"):
        if event.action in ASK_ACTIONS:
            latest_ask[(event.target_id, ASK_ACTIONS[event.action])] = event
        else:
            latest_grant[(event.target_id, GRANT_ACTIONS[event.action])] = event.occurred_at
    unanswered = [
        (key, event)
        for key, event in latest_ask.items()
        if key not in latest_grant or latest_grant[key] < event.occurred_at
    ]
    requests = GpuRequest.objects.select_related("owner", "project", "flavor", "team").in_bulk(
        [int(target_id) for (target_id, _), _ in unanswered]
    )
    return [
        OpenAsk(requests[int(target_id)], about, event.message, event.occurred_at, event.actor)
        for (target_id, about), event in sorted(unanswered, key=lambda item: item[1].occurred_at)
    ]


def deferred_approvals() -> QuerySet[GpuRequest]:
    """Pending requests a lead approved to run once quota frees, oldest first. The audit events
    are read for the pending requests only, so the read stays as small as the inbox."""
    pending = [
        str(pk)
        for pk in GpuRequest.objects.filter(status=RequestStatus.PENDING_APPROVAL).values_list(
            "pk", flat=True
        )
    ]
    deferred = AuditEvent.objects.filter(
        target_type="GpuRequest", action=DEFERRED_APPROVAL_ACTION, target_id__in=pending
    ).values_list("target_id", flat=True)
    return GpuRequest.objects.filter(
        status=RequestStatus.PENDING_APPROVAL, pk__in=[int(pk) for pk in deferred]
    ).order_by("created_at", "pk")


def deferring_lead(request: GpuRequest) -> Any:
    """The lead who last approved `request` to run when quota frees, or None."""
    event = (
        AuditEvent.objects.filter(
            target_type="GpuRequest", target_id=str(request.pk), action=DEFERRED_APPROVAL_ACTION
        )
        .select_related("actor")
        .order_by("-occurred_at", "-id")
        .first()
    )
    return event.actor if event else None
