"""Crash-looping work: retried after a backoff that doubles with each crash, up to a cap, and
stopped for good when the same image crashes the same way as its last crash.

Sync (`verdicts.settle`) calls here when a workload reads `failed` / `CrashLoopBackOff`:
1. the crash's signature: the request's image and the main container's last exit (code and
   the runtime's reason, e.g. 137 / OOMKilled), as sync recorded them on the allocation;
2. the same signature as the request's previous crash (an earlier attempt ended `crash_loop`):
   failed, "OOMKilled (exit code 137) twice with image X; not retried.";
3. otherwise back to the queue (`requeue_or_fail`, up to the tier's `max_attempts`), not
   admitted before `retry_not_before`: CRASH_RETRY_BASE_SECONDS after the first crash,
   doubling per crash, at most CRASH_RETRY_MAX_SECONDS (`scheduling.reclaim_rules`). The
   request's blocker says when (`retry_backoff`).
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from runtime.cluster.base import WorkloadStatus
from runtime.services.outcomes import fail_request, requeue_or_fail
from scheduling.choices import RequestStatus
from scheduling.models import Allocation, GpuRequest, ReclaimPolicy
from scheduling.reclaim_rules import (
    CrashSignature,
    crash_retry_delay_seconds,
    crashed_the_same_way,
)
from scheduling.services.blockers import retry_blocker

CRASH_LOOP_CODE = "crash_loop"


def previous_crash(request: GpuRequest) -> CrashSignature | None:
    """How the request's last crashed attempt before this one ended, if one did."""
    allocation = (
        Allocation.objects.filter(
            request=request, attempt__lt=request.attempt, end_reason=CRASH_LOOP_CODE
        )
        .order_by("-attempt")
        .only("exit_code", "exit_reason")
        .first()
    )
    if allocation is None:
        return None
    return CrashSignature(request.image, allocation.exit_code, allocation.exit_reason)


def settle_crash(request: GpuRequest, status: WorkloadStatus) -> str:
    """Retry or stop crash-looping work (module docstring); returns the request's new status."""
    request = GpuRequest.objects.select_related("flavor__pool").get(pk=request.pk)
    crash = CrashSignature(request.image, status.exit_code, status.exit_reason)
    how = crash.describe()
    evidence = {
        "image": request.image,
        "exit_code": status.exit_code,
        "exit_reason": status.exit_reason,
        "message": status.message,
    }
    if crashed_the_same_way(previous_crash(request), crash):
        reason = f"{how} twice with image {request.image}; not retried."
        fail_request(
            request,
            reason=f"Failed — {reason}",
            code=CRASH_LOOP_CODE,
            notice=f"Its container crashed the same way on two attempts: {reason}",
            evidence={**evidence, "repeated": True},
        )
        return RequestStatus.FAILED
    crashes = 1 + Allocation.objects.filter(request=request, end_reason=CRASH_LOOP_CODE).count()
    delay = crash_retry_delay_seconds(
        crashes=crashes,
        base_seconds=settings.CRASH_RETRY_BASE_SECONDS,
        max_seconds=settings.CRASH_RETRY_MAX_SECONDS,
    )
    retry_at = timezone.now() + timedelta(seconds=delay)
    wait = (
        f"It crashed ({how}); retried at {retry_at:%H:%M:%S} UTC, "
        f"after a {delay:g} s backoff (crash {crashes})."
    )
    policy = ReclaimPolicy.objects.filter(tier_id=request.flavor.pool.tier_id).first()
    outcome = requeue_or_fail(
        request,
        reason=f"The container keeps crashing ({status.message})",
        code=CRASH_LOOP_CODE,
        max_attempts=(policy or ReclaimPolicy()).max_attempts,
        evidence={**evidence, "crashes": crashes, "retry_in_seconds": delay},
        queued_fields={
            "retry_not_before": retry_at,
            "waiting_reason": wait,
            "blocker": retry_blocker(
                message=wait, retry_at=retry_at.isoformat(), failure=status.message
            ),
        },
    )
    return RequestStatus.QUEUED if outcome == "requeued" else RequestStatus.FAILED
