"""What a cluster reports back: workload status, node inventory, logs, events, watch changes.

Plain Python values the backends fill in from what they read (`kubernetes_status`, the
simulated fleet) and the portal maps onto its models.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from runtime.cluster.specs import Taint, WorkloadKind

# Why a container waits for its image (`pending`): it may still come, so the portal waits a grace
# period (IMAGE_PULL_GRACE_SECONDS) before it fails the request.
IMAGE_PULL_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff"})
WorkloadPhase = Literal["pending", "running", "succeeded", "failed", "suspended", "missing"]


@dataclass(frozen=True, slots=True)
class LogLine:
    """One line a workload's container wrote: when (None if the cluster did not say), from
    which pod, and the text without its line break."""

    pod: str
    text: str
    at: datetime | None = None


@dataclass(frozen=True, slots=True)
class ClusterEvent:
    """An event the cluster recorded about one of a workload's objects (pod, Job, ...)."""

    at: datetime | None
    type: str  # Normal or Warning
    reason: str
    message: str
    object_kind: str
    object_name: str
    count: int = 1


@dataclass(frozen=True, slots=True)
class WorkloadStatus:
    """What the cluster says about one attempt of one request.

    `phase` is `missing` only when a specific workload was asked for and nothing exists; listings
    never report missing workloads. `suspended` is a notebook or service scaled to zero by
    reclamation (`suspended_at` says since when); it holds no GPUs and can be resumed. `reason` is
    a short machine word (`Unschedulable`, `ImagePullBackOff`, `DeadlineExceeded`, ...) and
    `message` the human explanation.

    A gang reports `gang_size` ranks and the node of each (`node_names`, rank order; `node_name`
    is rank 0's). `gpu_uuids` are the cards HAMi assigned to a vGPU pod (its
    `hami.io/vgpu-devices-allocated` annotation) and `device_indexes` their positions in the
    node's HAMi registration, the portal's device indexes. `pod_names` are the live pods (rank
    order for a gang) and `exit_code` the main container's last exit, once it has exited, with
    `exit_reason` the runtime's word for it (`OOMKilled`, `Error`).
    """

    request_id: str
    attempt: int
    phase: WorkloadPhase
    namespace: str
    name: str
    kind: WorkloadKind | None = None
    reason: str = ""
    message: str = ""
    node_name: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    team_slug: str = ""
    project_slug: str = ""
    suspended_at: datetime | None = None
    gang_size: int = 1
    node_names: tuple[str, ...] = ()
    gpu_uuids: tuple[str, ...] = ()
    device_indexes: tuple[int, ...] = ()
    pod_names: tuple[str, ...] = ()
    exit_code: int | None = None
    exit_reason: str = ""

    @property
    def is_finished(self) -> bool:
        return self.phase in ("succeeded", "failed")


@dataclass(frozen=True, slots=True)
class HamiDevice:
    """One physical GPU as HAMi's device plugin registers it in the node annotation."""

    uuid: str
    split_count: int
    memory_mib: int
    cores_percent: int
    model: str
    numa: int
    healthy: bool


@dataclass(frozen=True, slots=True)
class NodeInventory:
    """A node and its GPUs as the cluster reports them.

    `gpu_count` counts physical cards (from the GPU feature discovery label, HAMi's registration,
    the `nvidia.com/gpu` allocatable or the DRA driver's ResourceSlices, in that order);
    `allocatable` keeps every resource as the raw quantity string. `mig_devices` maps a MIG
    profile (`1g.10gb`) to its allocatable count. `mig_layouts` is each card's MIG layout when
    the backend knows it card by card (the simulated cluster); None: read it from the
    `nvidia.com/mig.config` label and `mig_devices` (scheduling/engine/mig.py).
    """

    name: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    ready: bool
    schedulable: bool
    allocatable: Mapping[str, str]
    capacity: Mapping[str, str]
    gpu_model: str | None
    gpu_count: int
    gpu_memory_mib: int | None
    mig_devices: Mapping[str, int] = field(default_factory=dict)
    hami_devices: tuple[HamiDevice, ...] = ()
    vgpu_slots: int = 0
    cpu_millicores: int = 0
    memory_mib: int = 0
    # GPU resources held by running pods the portal did not create (no portal labels), e.g.
    # `{"nvidia.com/gpu": 2}`; HAMi's per-card gpumem/gpucores are totalled over the cards.
    foreign_usage: Mapping[str, int] = field(default_factory=dict)
    # GPUs the node's ResourceSlices of driver gpu.nvidia.com offer (Dynamic Resource Allocation).
    dra_gpu_count: int = 0
    mig_layouts: tuple[Mapping[str, int], ...] | None = None


@dataclass(frozen=True, slots=True)
class WorkloadEvent:
    """A change seen by a watch.

    `changed`/`deleted` name one workload to re-read; `bookmark` only moves the resource version
    on; `resync` means the watch lost its place (410 Gone) and the caller must re-list.
    """

    type: Literal["changed", "deleted", "bookmark", "resync"]
    resource_version: str
    namespace: str = ""
    request_id: str = ""
    attempt: int = 0
