"""How the portal ends live work: reclaimed (with the reason and its evidence), or, for work
lost through no fault of its own, back to the queue up to the tier's attempts.

Apart from `reclaim` so that `execution` (sync) ends work the same way the reclaim pass does
without importing it: a Job stopped at its deadline is a timeout reclaim, crash-looping work is
retried as lost work is.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from scheduling import dispatch
from scheduling.choices import RESUMABLE_KINDS, RequestStatus
from scheduling.engine.reserve import format_duration
from scheduling.models import GpuRequest
from scheduling.services.lifecycle import end_allocation, record_request_event, transition
from scheduling.services.notifications import notify


def reclaim_request(
    request: GpuRequest, *, reason: str, code: str, evidence: dict[str, Any]
) -> bool:
    """Stop running work: reclaimed, with the reason and the data behind it.

    A job's workload is deleted. A notebook's or service's is scaled to zero instead (its
    Deployment and Service stay, its pods and GPUs go), so that resuming brings the same
    workload back; zombie cleanup deletes it once SUSPENDED_WORKLOAD_RETENTION_SECONDS pass
    without a resume.
    """
    with transaction.atomic():
        if not transition(
            request, RequestStatus.RECLAIMED, actor=None, reason=reason, idle_warned_at=None
        ):
            return False
        allocation = end_allocation(request, reason=f"reclaimed: {code}")
        record_request_event(
            request,
            actor=None,
            action=f"reclaim.{code}",
            message=reason,
            data=evidence,
        )
        if allocation is not None and request.kind in RESUMABLE_KINDS:
            dispatch.request_scale_to_zero(request.pk, allocation.attempt, f"reclaimed: {code}")
        elif allocation is not None:
            dispatch.request_termination(request.pk, allocation.attempt, f"reclaimed: {code}")
        notify(
            users=[request.owner],
            subject=f"GPU request {request.pk} was reclaimed",
            body=reason,
            event={"type": f"reclaim.{code}", "request": request.pk, "evidence": evidence},
        )
        dispatch.request_scheduling_cycle()
    return True


def requeue_or_fail(
    request: GpuRequest,
    *,
    reason: str,
    code: str,
    max_attempts: int,
    evidence: dict[str, Any] | None = None,
    queued_fields: dict[str, Any] | None = None,
) -> str:
    """Work lost through no fault of its own goes back to the queue, up to `max_attempts` tries;
    `queued_fields` are written with the move back to the queue (a crash's retry backoff)."""
    with transaction.atomic():
        allocation = end_allocation(request, reason=code)
        if allocation is not None:
            dispatch.request_termination(request.pk, allocation.attempt, code)
        record_request_event(
            request,
            actor=None,
            action=f"reclaim.{code}",
            message=reason,
            data=evidence,
        )
        if request.attempt < max_attempts and request.status in (
            RequestStatus.LAUNCHING,
            RequestStatus.RUNNING,
            RequestStatus.ADMITTED,
        ):
            transition(request, RequestStatus.PREEMPTED, actor=None, reason=reason)
            transition(
                request,
                RequestStatus.QUEUED,
                actor=None,
                reason=f"Requeued: {reason}",
                **(queued_fields or {}),
            )
            dispatch.request_scheduling_cycle()
            return "requeued"
        fail_request(
            request,
            reason=f"{reason} — gave up after {request.attempt} attempts.",
            code=code,
            notice=f"{reason}. It was tried {request.attempt} times.",
        )
        return "failed"


def fail_request(
    request: GpuRequest,
    *,
    reason: str,
    code: str,
    notice: str = "",
    evidence: dict[str, Any] | None = None,
) -> bool:
    """End live work as failed for good: its GPUs freed, its workload deleted, the owner told.
    `evidence`, when given, is recorded as a `reclaim.<code>` event. False if it had ended."""
    with transaction.atomic():
        allocation = end_allocation(request, reason=code)
        if allocation is not None:
            dispatch.request_termination(request.pk, allocation.attempt, code)
        if evidence is not None:
            record_request_event(
                request, actor=None, action=f"reclaim.{code}", message=reason, data=evidence
            )
        if not transition(request, RequestStatus.FAILED, actor=None, reason=reason):
            return False
        notify(
            users=[request.owner],
            subject=f"GPU request {request.pk} failed",
            body=notice or reason,
            event={"type": f"reclaim.{code}", "request": request.pk},
        )
        dispatch.request_scheduling_cycle()
    return True


def reclaim_timed_out(request: GpuRequest, *, source: str = "") -> bool:
    """A timeout reclaim: the work reached its max runtime (as extended). The reclaim pass
    makes it when its clock says so, sync when the cluster stopped a Job at its deadline
    (`source` says which, in the evidence)."""
    started = request.started_at
    evidence: dict[str, Any] = {
        "started_at": started.isoformat() if started else None,
        "max_runtime_seconds": request.max_runtime_seconds,
    }
    if source:
        evidence["source"] = source
    reason = (
        f"Stopped: it reached its max runtime of {format_duration(request.max_runtime_seconds)}."
    )
    return reclaim_request(request, reason=reason, code="timeout", evidence=evidence)
