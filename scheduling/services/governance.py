"""Writes of the oversight of running work: asks, idle exemptions, longer runtimes, and the
owner's own Keep alive for a notebook."""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from scheduling import dispatch
from scheduling.choices import RequestStatus, WorkloadKind
from scheduling.models.catalog import ReclaimPolicy
from scheduling.models.requests import GpuRequest
from scheduling.selectors.approvals import team_leads
from scheduling.selectors.notebooks import keep_alive_until
from scheduling.services.common import invalid_field, require_decider
from scheduling.services.lifecycle import record_request_event
from scheduling.services.notifications import notify
from tenants.errors import ConflictError, ForbiddenError
from tenants.scope import Actor


def _require_live(request: GpuRequest, what: str) -> None:
    if request.status not in (RequestStatus.RUNNING, RequestStatus.LAUNCHING):
        raise ConflictError(
            "illegal_transition",
            f"Request {request.pk} is {request.status}; only running work can {what}.",
            fields={"status": request.status},
        )


@transaction.atomic
def ask_lead(*, actor: Actor, request: GpuRequest, about: str, reason: str) -> GpuRequest:
    """The owner asks the team lead for an idle exemption or a longer runtime."""
    if request.owner_id != actor.pk:
        raise ForbiddenError("forbidden", "Only the owner asks for this request.")
    _require_live(request, "be extended or exempted")
    if not reason.strip():
        raise invalid_field("reason", "Say why the work needs it.")
    what = {"idle_exemption": "an idle exemption", "extension": "a longer runtime"}[about]
    record_request_event(
        request,
        actor=actor,
        action=f"request.asked_{about}",
        message=reason,
    )
    notify(
        users=team_leads(team=request.team),
        subject=f"{actor} asks for {what} for GPU request {request.pk}",
        body=reason,
        event={"type": f"request.asked_{about}", "request": request.pk},
    )
    return request


@transaction.atomic
def grant_idle_exemption(
    *, actor: Actor, request: GpuRequest, hours: int, comment: str = ""
) -> GpuRequest:
    """The lead keeps idle work from being reclaimed for a while (e.g. a debugging session)."""
    require_decider(actor, request)
    _require_live(request, "be exempted")
    until = timezone.now() + timedelta(hours=hours)
    GpuRequest.objects.filter(pk=request.pk).update(idle_exempt_until=until, idle_warned_at=None)
    request.refresh_from_db()
    record_request_event(
        request,
        actor=actor,
        action="request.idle_exemption",
        message=comment,
        data={"until": until.isoformat()},
    )
    notify(
        users=[request.owner],
        subject=f"GPU request {request.pk} is exempt from idle reclamation",
        body=f"Until {until:%Y-%m-%d %H:%M} UTC. {comment}",
        event={"type": "request.idle_exemption", "request": request.pk},
    )
    return request


@transaction.atomic
def extend_runtime(
    *, actor: Actor, request: GpuRequest, seconds: int, comment: str = ""
) -> GpuRequest:
    """The lead gives running work more time, up to twice the tier's maximum in all."""
    require_decider(actor, request)
    _require_live(request, "be extended")
    ceiling = 2 * request.flavor.pool.tier.max_runtime_seconds
    new_total = request.max_runtime_seconds + seconds
    if new_total > ceiling:
        raise invalid_field(
            "seconds", f"At most {ceiling} seconds in all for the {request.flavor.pool.tier} tier."
        )
    GpuRequest.objects.filter(pk=request.pk).update(
        max_runtime_seconds=new_total, timeout_warned_at=None
    )
    request.refresh_from_db()
    record_request_event(
        request,
        actor=actor,
        action="request.extended",
        message=comment,
        data={"added_seconds": seconds, "max_runtime_seconds": new_total},
    )
    dispatch.request_deadline_change(request.pk, request.attempt)
    notify(
        users=[request.owner],
        subject=f"GPU request {request.pk} may run longer",
        body=f"Its max runtime is now {new_total} seconds. {comment}",
        event={"type": "request.extended", "request": request.pk},
    )
    return request


@transaction.atomic
def keep_notebook_alive(*, actor: Actor, request: GpuRequest) -> GpuRequest:
    """The owner says they are still at their notebook: its idle rule waits for the tier's
    keep-alive span from now. A longer exemption the lead gave is kept, never shortened."""
    if request.owner_id != actor.pk:
        raise ForbiddenError("forbidden", "Only the notebook's owner keeps it alive.")
    if request.kind != WorkloadKind.NOTEBOOK:
        raise invalid_field("kind", "Keep alive is for notebooks.")
    _require_live(request, "be kept alive")
    tier_id = request.flavor.pool.tier_id
    policy = ReclaimPolicy.objects.filter(tier_id=tier_id).first() or ReclaimPolicy()
    if policy.notebook_keep_alive_seconds == 0:
        raise ForbiddenError(
            "keep_alive_off",
            f"The {request.flavor.pool.tier} tier has no Keep alive: ask your team lead for "
            "an idle exemption.",
        )
    until = keep_alive_until(policy=policy, now=timezone.now())
    if request.idle_exempt_until is not None and request.idle_exempt_until >= until:
        return request
    GpuRequest.objects.filter(pk=request.pk).update(idle_exempt_until=until, idle_warned_at=None)
    request.refresh_from_db()
    record_request_event(
        request,
        actor=actor,
        action="request.kept_alive",
        message=f"Kept alive until {until:%H:%M} UTC.",
        data={"until": until.isoformat()},
    )
    return request
