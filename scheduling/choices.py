"""The fixed vocabularies of GPU requests and pools."""

from __future__ import annotations

from django.db import models


class SharingMode(models.TextChoices):
    EXCLUSIVE = "exclusive", "Whole cards"
    VGPU = "vgpu", "vGPU share (HAMi)"
    MIG = "mig", "MIG profiles"


class FlavorKind(models.TextChoices):
    WHOLE = "whole", "Whole card"
    VGPU = "vgpu", "vGPU share"
    MIG = "mig", "MIG slice"


SHARING_MODE_OF_FLAVOR_KIND: dict[str, str] = {
    FlavorKind.WHOLE: SharingMode.EXCLUSIVE,
    FlavorKind.VGPU: SharingMode.VGPU,
    FlavorKind.MIG: SharingMode.MIG,
}


class Placement(models.TextChoices):
    PORTAL = "portal", "The portal picks the node"
    CLUSTER = "cluster", "The cluster's scheduler picks inside the pool"


class SchedulerMode(models.TextChoices):
    """Who admits a cluster's requests (docs/kueue.md)."""

    PORTAL = "portal", "The portal's engine"
    KUEUE = "kueue", "Kueue on the cluster"


class DeviceAllocation(models.TextChoices):
    """How a pool's pods ask the cluster for their cards (docs/kubernetes-backend.md)."""

    DEVICE_PLUGIN = "device-plugin", "Device plugin (nvidia.com/gpu)"
    DRA = "dra", "Dynamic Resource Allocation (ResourceClaim)"


class Scoring(models.TextChoices):
    BINPACK = "binpack", "Bin-pack"
    SPREAD = "spread", "Spread"


class WorkloadKind(models.TextChoices):
    JOB = "job", "Batch job"
    NOTEBOOK = "notebook", "Notebook"
    SERVICE = "service", "Inference service"


class Priority(models.TextChoices):
    LOW = "low", "Low"
    NORMAL = "normal", "Normal"
    HIGH = "high", "High"
    CRITICAL = "critical", "Critical"


PRIORITY_RANK: dict[str, int] = {
    Priority.LOW: 0,
    Priority.NORMAL: 1,
    Priority.HIGH: 2,
    Priority.CRITICAL: 3,
}


class RequestStatus(models.TextChoices):
    PENDING_APPROVAL = "pending_approval", "Pending approval"
    APPROVED = "approved", "Approved"
    QUEUED = "queued", "Queued"
    ADMITTED = "admitted", "Admitted"
    LAUNCHING = "launching", "Launching"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    PREEMPTED = "preempted", "Preempted"
    RECLAIMED = "reclaimed", "Reclaimed"
    REJECTED = "rejected", "Rejected"
    EXPIRED = "expired", "Expired"


S = RequestStatus
# Every legal move of the lifecycle; anything else is a 409.
TRANSITIONS: dict[str, frozenset[str]] = {
    S.PENDING_APPROVAL: frozenset({S.APPROVED, S.REJECTED, S.CANCELLED, S.EXPIRED}),
    S.APPROVED: frozenset({S.QUEUED, S.CANCELLED}),
    S.QUEUED: frozenset({S.ADMITTED, S.CANCELLED, S.EXPIRED}),
    # Failed when the cluster refuses the project's namespace before the workload is created.
    S.ADMITTED: frozenset({S.LAUNCHING, S.QUEUED, S.CANCELLED, S.PREEMPTED, S.FAILED}),
    S.LAUNCHING: frozenset({S.RUNNING, S.FAILED, S.CANCELLED, S.PREEMPTED, S.SUCCEEDED}),
    S.RUNNING: frozenset({S.SUCCEEDED, S.FAILED, S.CANCELLED, S.PREEMPTED, S.RECLAIMED}),
    # Back to the queue, or failed once its tier's retry limit is used up.
    S.PREEMPTED: frozenset({S.QUEUED, S.CANCELLED, S.FAILED}),
    S.SUCCEEDED: frozenset(),
    S.FAILED: frozenset(),
    S.CANCELLED: frozenset(),
    S.RECLAIMED: frozenset({S.QUEUED}),  # a reclaimed notebook or service may be resumed
    S.REJECTED: frozenset(),
    S.EXPIRED: frozenset(),
}
# Where a request's run is over (its usage interval closed); only a resume leaves `reclaimed`.
FINISHED_STATUSES = frozenset(
    {S.SUCCEEDED, S.FAILED, S.CANCELLED, S.RECLAIMED, S.REJECTED, S.EXPIRED}
)
RESUMABLE_KINDS = frozenset({"notebook", "service"})
# States whose GPUs count against a project's quota limit (asked for and not yet given back).
COMMITTED_STATUSES = frozenset(
    {S.APPROVED, S.QUEUED, S.ADMITTED, S.LAUNCHING, S.RUNNING, S.PREEMPTED}
)
CANCELLABLE_STATUSES = frozenset(
    status for status, moves in TRANSITIONS.items() if S.CANCELLED in moves
)
