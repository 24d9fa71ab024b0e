"""The request lifecycle: every status change goes through `transition()` (or, for several
moves made at once, `transition_through()`; for one move of many requests, `transition_many()`;
for many requests each along its own moves, `transition_each()`), and only them.

A transition is a compare-and-set UPDATE (… WHERE status = <expected>), so two workers racing
for the same move cannot both make it; repeating a move that already happened changes nothing.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import F
from django.utils import timezone

from scheduling.choices import FINISHED_STATUSES, TRANSITIONS, RequestStatus
from scheduling.models import Allocation, GpuRequest
from scheduling.services.blockers import NEXT_CYCLE_REASON
from scheduling.services.notifications import settle_approval_notices
from tenants.errors import ConflictError
from tenants.models import AuditEvent
from tenants.scope import Actor
from tenants.services.organisation import record_audit_event

TIMESTAMP_OF_STATUS: dict[str, str] = {
    RequestStatus.APPROVED: "approved_at",
    RequestStatus.QUEUED: "queued_at",
    RequestStatus.RUNNING: "started_at",
}
# A resumed request is running again, not finished.
CLEARED_BY_STATUS: dict[str, tuple[str, ...]] = {RequestStatus.QUEUED: ("finished_at",)}


def transition(
    request: GpuRequest, to: str, *, actor: Actor | None, reason: str = "", **fields: Any
) -> bool:
    """Move `request` to status `to`; True if it moved, False if it was already there.

    Raises ConflictError (409) when the lifecycle does not allow the move from the current state.
    """
    return transition_through(request, [Move(to, reason, actor)], **fields)


@dataclass(frozen=True, slots=True)
class Move:
    to: str
    reason: str = ""
    actor: Actor | None = None


def transition_through(request: GpuRequest, moves: Sequence[Move], **fields: Any) -> bool:
    """Make several moves in a row (approved, then queued) as one compare-and-set UPDATE.

    Each move must be allowed from the one before, and each is audited as if made alone; True
    if the request moved, False if it already was where the last move leads.
    """
    current = request.status
    if len(moves) == 1 and moves[0].to == current and current not in TRANSITIONS[current]:
        return False  # a repeated move that already happened changes nothing
    changes = _planned_changes(request, moves, **fields)
    moved = GpuRequest.objects.filter(pk=request.pk, status=current).update(**changes)
    if not moved:
        request.refresh_from_db()
        if request.status == moves[-1].to:
            return False
        raise _illegal(request, request.status, moves[0].to)
    for field, value in changes.items():
        setattr(request, field, value)
    AuditEvent.objects.bulk_create(_move_events(request, current, moves))
    if current == RequestStatus.PENDING_APPROVAL:
        settle_approval_notices(request_id=request.pk)
    return True


def transition_many(
    requests: Sequence[GpuRequest],
    move: Move,
    *,
    next_attempt: bool = False,
    batch_size: int = 500,
    **fields: Any,
) -> list[GpuRequest]:
    """Make one move for many requests that share a status, in batched compare-and-set UPDATEs.

    The cycle admits thousands of requests at once; one UPDATE per batch replaces one per
    request. Each batch (1) locks the rows still in the status they were read in (a request
    cancelled meanwhile is left alone, as `transition` would find it), (2) updates them, and
    (3) files one audit event per request, as if each moved alone. `next_attempt` counts a new
    attempt. Returns the requests that moved, their fields updated in memory.
    """
    moved: list[GpuRequest] = []
    for start in range(0, len(requests), batch_size):
        batch = {request.pk: request for request in requests[start : start + batch_size]}
        statuses = {request.status for request in batch.values()}
        if len(statuses) != 1:
            raise ValueError(f"requests moved together must share a status, not {statuses}")
        current = statuses.pop()
        changes = _planned_changes(next(iter(batch.values())), [move], **fields)
        # 1. Lock the rows still where they were read.
        still = list(
            GpuRequest.objects.select_for_update()
            .filter(pk__in=list(batch), status=current)
            .values_list("pk", flat=True)
        )
        # 2. Move them.
        update = {**changes, "attempt": F("attempt") + 1} if next_attempt else changes
        GpuRequest.objects.filter(pk__in=still).update(**update)
        events = []
        for pk in still:
            request = batch[pk]
            for field, value in changes.items():
                setattr(request, field, value)
            if next_attempt:
                request.attempt += 1
            moved.append(request)
            events.extend(_move_events(request, current, [move]))
        # 3. Audit each move.
        AuditEvent.objects.bulk_create(events)
    return moved


def transition_each(
    paths: Sequence[tuple[GpuRequest, Sequence[Move]]], *, batch_size: int = 500
) -> list[GpuRequest]:
    """Move each request along its own moves (preempted, then queued), in batched
    compare-and-set UPDATEs.

    The cycle preempts hundreds of requests at once, from different statuses and for different
    reasons. Each batch (1) locks the rows still in the status they were read in (a request that
    moved meanwhile is left alone, as `transition_many` leaves it), (2) updates them with one
    UPDATE per distinct set of changes (the moves' reasons differ, but the row each path leaves
    mostly does not), and (3) files each move's audit event as if each request moved alone.
    Returns the requests that moved, their fields updated in memory.
    """
    moved: list[GpuRequest] = []
    for start in range(0, len(paths), batch_size):
        batch = {
            request.pk: (request, moves) for request, moves in paths[start : start + batch_size]
        }
        now = timezone.now()
        planned = {
            pk: _planned_changes(request, moves, now=now) for pk, (request, moves) in batch.items()
        }
        # 1. Lock the rows still where they were read.
        locked = dict(
            GpuRequest.objects.select_for_update()
            .filter(pk__in=list(batch))
            .values_list("pk", "status")
        )
        still = [pk for pk, (request, _) in batch.items() if locked.get(pk) == request.status]
        # 2. Move them, one UPDATE for the rows that end the same.
        groups: dict[tuple[tuple[str, Any], ...], list[int]] = defaultdict(list)
        for pk in still:
            groups[tuple(sorted(planned[pk].items()))].append(pk)
        for changes, pks in groups.items():
            GpuRequest.objects.filter(pk__in=pks).update(**dict(changes))
        # 3. Audit each move.
        events = []
        for pk in still:
            request, moves = batch[pk]
            initial = request.status
            for field, value in planned[pk].items():
                setattr(request, field, value)
            moved.append(request)
            events.extend(_move_events(request, initial, moves))
        AuditEvent.objects.bulk_create(events)
    return moved


def create_through(
    request: GpuRequest,
    moves: Sequence[Move] = (),
    *,
    actor: Actor,
    data: dict[str, Any] | None = None,
    **fields: Any,
) -> None:
    """Insert a new request already moved along `moves` from its initial status.

    A submission approved at once is born queued: one INSERT for the row and one for its audit
    events (`request.submitted` by `actor` with `data`, then one per move, as `transition_through`
    files them) instead of an INSERT, an UPDATE and two audit INSERTs.
    """
    initial = request.status
    submitted_data = {**request.as_audit_data(), **(data or {})}
    for field, value in (_planned_changes(request, moves, **fields) if moves else fields).items():
        setattr(request, field, value)
    request.save(force_insert=True)
    submitted = record_request_event(
        request, actor=actor, action="request.submitted", data=submitted_data, commit=False
    )
    AuditEvent.objects.bulk_create([submitted, *_move_events(request, initial, moves)])


def _planned_changes(
    request: GpuRequest, moves: Sequence[Move], *, now: Any = None, **fields: Any
) -> dict[str, Any]:
    """The fields `moves` set from the request's status (stamped `now`, by default the current
    time); a ConflictError if one is not allowed."""
    if not moves:
        raise ValueError("a lifecycle change needs at least one move")
    statuses = [request.status, *(move.to for move in moves)]
    for before, after in itertools.pairwise(statuses):
        if after not in TRANSITIONS[before]:
            raise _illegal(request, before, after)
    now = now or timezone.now()
    changes: dict[str, Any] = {"updated_at": now, **fields}
    for move in moves:
        if move.to in TIMESTAMP_OF_STATUS:
            changes[TIMESTAMP_OF_STATUS[move.to]] = now
        if move.to in FINISHED_STATUSES:
            changes["finished_at"] = now
        for field in CLEARED_BY_STATUS.get(move.to, ()):
            changes.setdefault(field, None)
            changes["queue_position"] = None
        if move.to == RequestStatus.QUEUED:
            changes.setdefault("waiting_reason", NEXT_CYCLE_REASON)
            changes.setdefault("waiting_code", "")
            changes.setdefault("reserved_start_at", None)
            changes.setdefault("queue_rank", None)
    changes.update(status=moves[-1].to, status_reason=moves[-1].reason)
    return changes


def _move_events(request: GpuRequest, initial: str, moves: Sequence[Move]) -> list[AuditEvent]:
    statuses = [initial, *(move.to for move in moves)]
    return [
        record_request_event(
            request,
            actor=move.actor,
            action=f"request.{move.to}",
            message=move.reason,
            data={"from": before, "to": move.to},
            commit=False,
        )
        for before, move in zip(statuses, moves, strict=False)
    ]


def record_request_event(
    request: GpuRequest,
    *,
    actor: Actor | None,
    action: str,
    message: str = "",
    data: dict[str, Any] | None = None,
    commit: bool = True,
) -> AuditEvent:
    """An audit event about a request, filed under its team and project (unsaved with
    `commit=False`)."""
    return record_audit_event(
        actor=actor,
        action=action,
        target=request,
        team=request.team,
        project=request.project,
        message=message,
        data=data,
        commit=commit,
    )


def _illegal(request: GpuRequest, current: str, to: str) -> ConflictError:
    return ConflictError(
        "illegal_transition",
        f"Request {request.pk} is {current}; it cannot become {to}.",
        fields={"status": current},
    )


def end_allocation(request: GpuRequest, *, reason: str) -> Allocation | None:
    """Close the request's running interval and free its GPUs for the next cycle."""
    allocation = Allocation.objects.active().filter(request=request).first()
    if allocation is not None:
        Allocation.objects.filter(pk=allocation.pk, ended_at__isnull=True).update(
            ended_at=timezone.now(), end_reason=reason[:200]
        )
    return allocation
