"""The request lifecycle: every status change goes through `transition()`, and only it.

A transition is a compare-and-set UPDATE (… WHERE status = <expected>), so two workers racing
for the same move cannot both make it; repeating a move that already happened changes nothing.
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from scheduling.choices import FINISHED_STATUSES, TRANSITIONS, RequestStatus
from scheduling.models import GpuRequest
from tenants.errors import ConflictError
from tenants.services import record_audit_event

TIMESTAMP_OF_STATUS: dict[str, str] = {
    RequestStatus.APPROVED: "approved_at",
    RequestStatus.QUEUED: "queued_at",
    RequestStatus.RUNNING: "started_at",
}
# A resumed request is running again, not finished.
CLEARED_BY_STATUS: dict[str, tuple[str, ...]] = {RequestStatus.QUEUED: ("finished_at",)}


def transition(
    request: GpuRequest, to: str, *, actor: Any, reason: str = "", **fields: Any
) -> bool:
    """Move `request` to status `to`; True if it moved, False if it was already there.

    Raises ConflictError (409) when the lifecycle does not allow the move from the current state.
    """
    current = request.status
    if to not in TRANSITIONS[current]:
        if current == to:
            return False
        raise _illegal(request, current, to)
    now = timezone.now()
    changes: dict[str, Any] = {"status": to, "status_reason": reason, "updated_at": now, **fields}
    if to in TIMESTAMP_OF_STATUS:
        changes[TIMESTAMP_OF_STATUS[to]] = now
    if to in FINISHED_STATUSES:
        changes["finished_at"] = now
    for field in CLEARED_BY_STATUS.get(to, ()):
        changes.setdefault(field, None)
        changes["queue_position"] = None
    moved = (
        GpuRequest.objects.filter(pk=request.pk, status=current)
        .of_team(request.team_id)
        .update(**changes)
    )
    if not moved:
        request.refresh_from_db()
        if request.status == to:
            return False
        raise _illegal(request, request.status, to)
    for field, value in changes.items():
        setattr(request, field, value)
    record_request_event(
        request,
        actor=actor,
        action=f"request.{to}",
        message=reason,
        data={"from": current, "to": to},
    )
    return True


def record_request_event(
    request: GpuRequest,
    *,
    actor: Any,
    action: str,
    message: str = "",
    data: dict[str, Any] | None = None,
) -> None:
    """An audit event about a request, filed under its team and project."""
    record_audit_event(
        actor=actor,
        action=action,
        target=request,
        team=request.team,
        project=request.project,
        message=message,
        data=data,
    )


def _illegal(request: GpuRequest, current: str, to: str) -> ConflictError:
    return ConflictError(
        "illegal_transition",
        f"Request {request.pk} is {current}; it cannot become {to}.",
        fields={"status": current},
    )
