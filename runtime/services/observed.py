"""What sync saw of an attempt's pods, kept on its allocation for the request's readers."""

from __future__ import annotations

from typing import Any

from runtime.cluster.base import WorkloadStatus
from scheduling.models import Allocation, GpuRequest


def record_observation(gpu_request: GpuRequest, status: WorkloadStatus) -> bool:
    """Store the pods' names, the main container's last exit (code and reason) and the last
    termination reason on the attempt's allocation; a field the cluster no longer reports keeps
    its last value (a finished Job's pod may be gone). Writes only on change; True when it
    wrote."""
    if status.phase == "missing" or status.attempt != gpu_request.attempt:
        return False
    changes: dict[str, Any] = {}
    if status.pod_names:
        changes["pod_names"] = list(status.pod_names)
    if status.exit_code is not None:
        changes["exit_code"] = status.exit_code
        changes["exit_reason"] = status.exit_reason[:60]
    if status.phase == "failed":
        detail = f"{status.reason}: {status.message}" if status.reason else status.message
        changes["termination_reason"] = detail[:500]
    elif status.phase == "succeeded":
        changes["termination_reason"] = status.reason or "Completed"
    if not changes:
        return False
    allocation = (
        Allocation.objects.filter(request=gpu_request, attempt=status.attempt)
        .only("pk", *changes)
        .first()
    )
    if allocation is None or all(getattr(allocation, k) == v for k, v in changes.items()):
        return False
    Allocation.objects.filter(pk=allocation.pk).update(**changes)
    return True
