"""The cluster's word on live work, in the portal's terms.

Sync (`execution.apply_workload_status`) asks here first:
1. a Job the cluster stopped at its deadline (`DeadlineExceeded`) reached its max runtime, as
   the lead last extended it: a timeout reclaim, as the reclaim pass would have made it;
2. crash-looping work (`CrashLoopBackOff`) is retried after a backoff, up to the tier's
   `ReclaimPolicy.max_attempts`, and stopped when it crashes the same way twice (`crashes`);
3. a container that cannot pull its image keeps the request waiting for
   IMAGE_PULL_GRACE_SECONDS from when sync first saw it (kept on the allocation), then fails it;
4. work the cluster has not started says why (the scheduler's message, a ResourceQuota's
   refusal, which image cannot be pulled and until when it may, ...) in the request's
   `status_reason`, `waiting_reason` and blocker, instead of the launch's "Creating the
   workload.".
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from runtime.cluster.base import WorkloadStatus
from runtime.cluster.reports import IMAGE_PULL_REASONS
from runtime.services.crashes import settle_crash
from runtime.services.outcomes import fail_request, reclaim_timed_out
from scheduling.choices import RequestStatus
from scheduling.models import Allocation, GpuRequest
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
    """Steps 1 to 3: end or retry the request when the cluster stopped its work for a reason
    the portal treats apart from failure, or fail it once its image pull's grace ran out;
    returns the request's new status, else None."""
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
        return settle_crash(request, status)
    if status.phase == "pending" and status.reason in IMAGE_PULL_REASONS:
        fails_at = image_pull_deadline(request, status)
        if timezone.now() >= fails_at:
            grace = settings.IMAGE_PULL_GRACE_SECONDS
            reason = (
                f"Failed — {status.reason}: {status.message} "
                f"(the pull did not succeed within {grace} s)."
            )
            if fail_request(request, reason=reason, code="image_pull"):
                return RequestStatus.FAILED
    return None


def image_pull_deadline(request: GpuRequest, status: WorkloadStatus) -> datetime:
    """When the attempt fails unless its image pull succeeds: IMAGE_PULL_GRACE_SECONDS after
    sync first saw the pull fail, which is stored on the allocation the first time."""
    now = timezone.now()
    attempt = Allocation.objects.filter(request=request, attempt=status.attempt)
    since = attempt.values_list("image_pull_failing_since", flat=True).first()
    if since is None:
        attempt.filter(image_pull_failing_since__isnull=True).update(image_pull_failing_since=now)
        since = attempt.values_list("image_pull_failing_since", flat=True).first() or now
    return since + timedelta(seconds=settings.IMAGE_PULL_GRACE_SECONDS)


def cluster_wait(status: WorkloadStatus, *, fails_at: datetime | None = None) -> tuple[str, str]:
    """(status_reason, waiting_reason) for a workload the cluster has not started; ("", "")
    for the ordinary steps of a start. An image that cannot be pulled is named in the
    headline, with when the request fails (`fails_at`) unless the pull succeeds."""
    if status.phase != "pending" or status.reason in ORDINARY_WAITS:
        return "", ""
    detail = f"{status.reason}: {status.message}" if status.message else status.reason
    headline = WAITING_HEADLINES.get(status.reason, "The cluster has not started it yet.")
    if status.reason == "FailedCreate" and "exceeded quota" in status.message:
        headline = "The namespace's ResourceQuota refuses its pod."
    if status.reason in IMAGE_PULL_REASONS and fails_at is not None:
        words = status.message[:1].upper() + status.message[1:]
        headline = f"{words}; the request fails at {fails_at:%H:%M} UTC unless the pull succeeds."
    return headline, detail


def record_wait(request: GpuRequest, status: WorkloadStatus) -> bool:
    """Step 4: store why the cluster has not started the request's work (or clear it once it
    runs); one UPDATE, only when it changed. True when it did."""
    if status.attempt != request.attempt or request.status not in LIVE_STATUSES:
        return False
    pulling = status.phase == "pending" and status.reason in IMAGE_PULL_REASONS
    fails_at = image_pull_deadline(request, status) if pulling else None
    headline, detail = cluster_wait(status, fails_at=fails_at)
    if detail == request.waiting_reason:
        return False
    if not pulling and request.waiting_reason.split(":")[0] in IMAGE_PULL_REASONS:
        # The pull went through (or the wait moved on): a later pull error starts a new grace.
        Allocation.objects.filter(request=request, attempt=status.attempt).update(
            image_pull_failing_since=None
        )
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
