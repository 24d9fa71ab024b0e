"""The cluster's word on live work, in the portal's terms.

Sync (`execution.apply_workload_status`) asks here first:
1. a Job the cluster stopped at its deadline (`DeadlineExceeded`) reached its max runtime, as
   the lead last extended it: a timeout reclaim, as the reclaim pass would have made it;
2. crash-looping work (`CrashLoopBackOff`) is retried like lost work, up to the tier's
   `ReclaimPolicy.max_attempts`, before it fails;
3. work the cluster has not started says why (the scheduler's message, a ResourceQuota's
   refusal, ...) in the request's `status_reason` and `waiting_reason`, instead of the
   launch's "Creating the workload.".
"""

from __future__ import annotations

from runtime.cluster.base import WorkloadStatus
from runtime.services.outcomes import reclaim_timed_out, requeue_or_fail
from scheduling.choices import RequestStatus
from scheduling.models import Allocation, GpuRequest, ReclaimPolicy
from scheduling.services.blockers import cluster_blocker
from scheduling.services.lifecycle import transition

DEADLINE_EXCEEDED = "DeadlineExceeded"
CRASH_LOOP = "CrashLoopBackOff"
# What the owner reads first, by the cluster's reason; the cluster's own words follow.
WAITING_HEADLINES = {
    "Unschedulable": "The cluster's scheduler cannot place it yet.",
    "FailedCreate": "The cluster refuses to create its pod.",
    "ErrImagePull": "The cluster cannot pull its image.",
    "ImagePullBackOff": "The cluster cannot pull its image.",
    "CrashLoopBackOff": "Its container keeps crashing.",
    "GangIncomplete": "Not every rank of the gang has started.",
}
# Waits every launch goes through: not worth a line on the page.
ORDINARY_WAITS = frozenset({"", "NoPod", "Pending", "ContainerCreating", "Completing"})
LIVE_STATUSES = (RequestStatus.LAUNCHING, RequestStatus.RUNNING)
STARTING = "The cluster is starting it."


def settle(request: GpuRequest, status: WorkloadStatus) -> str | None:
    """Steps 1 and 2: end or retry the request when the cluster stopped its work for a reason
    the portal treats apart from failure; returns the request's new status, else None."""
    if status.attempt != request.attempt or request.status not in LIVE_STATUSES:
        return None
    if status.phase == "failed" and status.reason == DEADLINE_EXCEEDED:
        if request.status == RequestStatus.LAUNCHING:
            if status.started_at is None:
                return None  # it never ran: a failure, with the cluster's reason
            # It ran between two syncs: record that first, then stop it.
            transition(request, RequestStatus.RUNNING, actor=None, reason="Running.")
            Allocation.objects.active().filter(request=request, started_at__isnull=True).update(
                started_at=status.started_at
            )
        if reclaim_timed_out(request, source="the cluster stopped it at its deadline"):
            return RequestStatus.RECLAIMED
        return None
    if status.phase == "failed" and status.reason == CRASH_LOOP:
        pool = GpuRequest.objects.select_related("flavor__pool").get(pk=request.pk).flavor.pool
        policy = ReclaimPolicy.objects.filter(tier_id=pool.tier_id).first() or ReclaimPolicy()
        reason = f"The container keeps crashing ({status.message})"
        outcome = requeue_or_fail(
            request, reason=reason, code="crash_loop", max_attempts=policy.max_attempts
        )
        return RequestStatus.QUEUED if outcome == "requeued" else RequestStatus.FAILED
    return None


def cluster_wait(status: WorkloadStatus) -> tuple[str, str]:
    """(status_reason, waiting_reason) for a workload the cluster has not started; ("", "")
    for the ordinary steps of a start."""
    if status.phase != "pending" or status.reason in ORDINARY_WAITS:
        return "", ""
    detail = f"{status.reason}: {status.message}" if status.message else status.reason
    headline = WAITING_HEADLINES.get(status.reason, "The cluster has not started it yet.")
    if status.reason == "FailedCreate" and "exceeded quota" in status.message:
        headline = "The namespace's ResourceQuota refuses its pod."
    return headline, detail


def record_wait(request: GpuRequest, status: WorkloadStatus) -> bool:
    """Step 3: store why the cluster has not started the request's work (or clear it once it
    runs); one UPDATE, only when it changed. True when it did."""
    if status.attempt != request.attempt or request.status not in LIVE_STATUSES:
        return False
    headline, detail = cluster_wait(status)
    if detail == request.waiting_reason:
        return False
    fields: dict[str, object] = {"waiting_reason": detail}
    if request.status == RequestStatus.LAUNCHING:
        fields["status_reason"] = headline or STARTING
    # The cluster's reason is the request's blocker until it runs (scheduling/services/blockers.py).
    launching = detail and request.status == RequestStatus.LAUNCHING
    fields["blocker"] = cluster_blocker(headline=headline, reason=detail) if launching else {}
    # Compare-and-set on the status: a transition made meanwhile keeps its own reason.
    changed = GpuRequest.objects.filter(pk=request.pk, status=request.status).update(**fields)
    for field, value in fields.items():
        setattr(request, field, value)
    return bool(changed)
