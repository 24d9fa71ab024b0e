"""The cluster backend interface: value types, errors and the `ClusterBackend` protocol.

Everything here is plain Python (no Django, no Kubernetes client) so that the Django layer maps
its models onto these values, the simulated backend implements the same protocol, and tests build
specs without a database. Units are in the names: `*_mib` is MiB, `*_percent` is 0-100 of one GPU,
`*_seconds` is seconds.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol, runtime_checkable

WorkloadKind = Literal["job", "notebook", "service"]
SharingMode = Literal["exclusive", "vgpu", "mig"]
WorkloadPhase = Literal["pending", "running", "succeeded", "failed", "suspended", "missing"]
PreemptionPolicy = Literal["PreemptLowerPriority", "Never"]
TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
VolumeAccessMode = Literal["ReadWriteMany", "ReadWriteOnce"]
SecretType = Literal["Opaque", "kubernetes.io/dockerconfigjson"]
RouteKind = Literal["ingress", "httproute"]
#: How a pod asks for its cards: the device plugin's `nvidia.com/gpu`, or a ResourceClaim (DRA).
DeviceAllocation = Literal["device-plugin", "dra"]

WORKLOAD_KINDS: tuple[WorkloadKind, ...] = ("job", "notebook", "service")
SHARING_MODES: tuple[SharingMode, ...] = ("exclusive", "vgpu", "mig")

# Label keys and values the portal puts on every object it creates. `MANAGED_BY` + its value is
# the selector for sync and zombie detection, so it must never change.
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "gpu-portal"
TEAM_LABEL = "gpu-portal/team"
PROJECT_LABEL = "gpu-portal/project"
REQUEST_LABEL = "gpu-portal/request"
ATTEMPT_LABEL = "gpu-portal/attempt"
KIND_LABEL = "gpu-portal/kind"
# The object name a Deployment's pods and Service are selected by. Not the attempt: a resumed
# attempt takes over the scaled-to-zero Deployment of an earlier one and relabels it.
WORKLOAD_LABEL = "gpu-portal/workload"
OWNER_ANNOTATION = "gpu-portal/owner"
REASON_ANNOTATION = "gpu-portal/launch-reason"
TERMINATE_REASON_ANNOTATION = "gpu-portal/terminate-reason"
MAX_RUNTIME_ANNOTATION = "gpu-portal/max-runtime-seconds"
# Set while a reclaimed notebook or service is scaled to zero: the replicas to resume with, and
# when it was scaled down (ISO 8601, UTC) so zombie cleanup can apply the retention period.
SUSPENDED_REPLICAS_ANNOTATION = "gpu-portal/suspended-replicas"
SUSPENDED_AT_ANNOTATION = "gpu-portal/suspended-at"
RESUMABLE_KINDS: tuple[WorkloadKind, ...] = ("notebook", "service")
# On each Job and pod of a gang (a job over several nodes): its rank, and how many ranks it has.
RANK_LABEL = "gpu-portal/rank"
GANG_SIZE_LABEL = "gpu-portal/gang-size"
# On a project's Secrets: the portal's revision of the values, so an older copy is replaced.
REVISION_ANNOTATION = "gpu-portal/revision"
WORKSPACE_MOUNT_PATH = "/workspace"
HOME_MOUNT_PATH = "/home/jovyan"

#: A request id becomes part of object names and label values, so it is limited to what both
#: accept; 40 characters leave room for the prefix and the attempt (a UUID is 36).
REQUEST_ID_PATTERN = re.compile(r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$")
MAX_ATTEMPT = 9999
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_MIG_PROFILE = re.compile(r"^[0-9]+g\.[0-9]+gb(\.[a-z0-9]+)?$")


def is_dns_label(value: str) -> bool:
    """True when `value` is a DNS-1123 label (object names such as Jobs, namespaces)."""
    return bool(_DNS_LABEL.match(value))


def is_label_value(value: str) -> bool:
    """True when `value` is a valid Kubernetes label value."""
    return bool(_LABEL_VALUE.match(value))


def workload_name(request_id: str, attempt: int) -> str:
    """The deterministic name of a request's workload objects, e.g. `gpr-812-a1`.

    Deterministic so that a retried launch finds what an earlier try created instead of making a
    second workload. It is a DNS-1123 label that also starts with a letter, so it is valid for
    Jobs, Deployments and Services alike.
    """
    if not REQUEST_ID_PATTERN.match(request_id):
        raise ValueError(
            f"request id {request_id!r} must be 1-40 lowercase letters, digits or '-', "
            "starting and ending with a letter or digit"
        )
    if not 1 <= attempt <= MAX_ATTEMPT:
        raise ValueError(f"attempt must be between 1 and {MAX_ATTEMPT}, not {attempt}")
    return f"gpr-{request_id}-a{attempt}"


def gang_member_name(name: str, rank: int) -> str:
    """The name of one rank of a gang workload `name` (its Job and pod hostname):
    `gpr-812-a1-r0`. At most 50 + 2 + 4 characters for ranks below 10,000."""
    return f"{name}-r{rank}"


def project_namespace(team_slug: str, project_slug: str) -> str:
    """A default namespace name for a project, e.g. `gp-vision-detection`.

    Long slugs are cut and suffixed with a short hash so the name stays a unique DNS label.
    """
    raw = re.sub(r"[^a-z0-9-]+", "-", f"gp-{team_slug}-{project_slug}".lower()).strip("-")
    if len(raw) <= 63:
        return raw
    digest = hashlib.sha256(raw.encode()).hexdigest()[:8]
    return f"{raw[:54].rstrip('-')}-{digest}"


@dataclass(frozen=True, slots=True)
class Taint:
    """A node taint, as the cluster reports it."""

    key: str
    effect: TaintEffect
    value: str = ""


@dataclass(frozen=True, slots=True)
class Toleration:
    """A pod toleration; `for_taint` makes the one that tolerates a pool's taint exactly."""

    key: str
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: TaintEffect | None = None
    toleration_seconds: int | None = None

    @classmethod
    def for_taint(cls, taint: Taint) -> Toleration:
        if taint.value:
            return cls(key=taint.key, operator="Equal", value=taint.value, effect=taint.effect)
        return cls(key=taint.key, operator="Exists", effect=taint.effect)


@dataclass(frozen=True, slots=True)
class LimitRangeSpec:
    """Per-container defaults and ceilings for a project namespace (quantity strings)."""

    default_limits: Mapping[str, str] = field(default_factory=dict)
    default_requests: Mapping[str, str] = field(default_factory=dict)
    max_limits: Mapping[str, str] = field(default_factory=dict)

    @property
    def is_empty(self) -> bool:
        return not (self.default_limits or self.default_requests or self.max_limits)


@dataclass(frozen=True, slots=True)
class ProjectSpec:
    """A project's namespace and the quota that mirrors the portal's.

    `quota` maps resource names to amounts, e.g. `{"requests.nvidia.com/gpu": 8,
    "requests.nvidia.com/mig-1g.10gb": 4, "requests.nvidia.com/gpumem": 98304}`. Extended
    resources may be given without the `requests.` prefix; Kubernetes only counts them with it.
    """

    team_slug: str
    project_slug: str
    namespace: str
    quota: Mapping[str, int | str] = field(default_factory=dict)
    limit_range: LimitRangeSpec = field(default_factory=LimitRangeSpec)

    def __post_init__(self) -> None:
        if not is_dns_label(self.namespace):
            raise ValueError(f"namespace {self.namespace!r} is not a DNS-1123 label")
        for slug in (self.team_slug, self.project_slug):
            if not slug or not is_label_value(slug):
                raise ValueError(f"slug {slug!r} is not a valid label value")


@dataclass(frozen=True, slots=True)
class PrioritySpec:
    """A cluster PriorityClass the portal owns, e.g. `gpu-portal-high` = 1000.

    `Never` by default: the engine decides preemption and the worker carries it out; a class
    that may preempt would let kube-scheduler evict portal work too, which then ends failed.
    """

    name: str
    value: int
    preemption_policy: PreemptionPolicy = "Never"
    description: str = ""

    def __post_init__(self) -> None:
        if not is_dns_label(self.name):
            raise ValueError(f"priority class name {self.name!r} is not a DNS-1123 label")
        # Values above one billion are reserved for system-critical classes.
        if not -2_147_483_648 <= self.value <= 1_000_000_000:
            raise ValueError(f"priority value {self.value} is outside -2^31..1e9")


@dataclass(frozen=True, slots=True)
class GangMember:
    """One node's share of a gang: the node the portal chose (None: the cluster's scheduler
    picks within the pool) and how many whole cards the rank's pod takes there."""

    node_name: str | None
    gpu_count: int


@dataclass(frozen=True, slots=True)
class VolumeClaimSpec:
    """A PersistentVolumeClaim of a project: its workspace or one member's home volume."""

    name: str
    size_gib: int
    storage_class: str | None = None
    access_mode: VolumeAccessMode = "ReadWriteMany"

    def __post_init__(self) -> None:
        if not is_dns_label(self.name):
            raise ValueError(f"claim name {self.name!r} is not a DNS-1123 label")
        if self.size_gib < 1:
            raise ValueError("a claim holds at least 1 GiB")


@dataclass(frozen=True, slots=True)
class SecretSpec:
    """A Secret of a project; `data` (never printed: repr=False) holds the values in clear,
    and `revision` grows with each change so an older copy on the cluster is replaced."""

    name: str
    revision: int
    data: Mapping[str, str] = field(default_factory=dict, repr=False)
    type: SecretType = "Opaque"

    def __post_init__(self) -> None:
        if not is_dns_label(self.name):
            raise ValueError(f"secret name {self.name!r} is not a DNS-1123 label")


@dataclass(frozen=True, slots=True)
class ProjectDataSpec:
    """The claims and Secrets that must exist in a project's namespace."""

    team_slug: str
    project_slug: str
    namespace: str
    claims: tuple[VolumeClaimSpec, ...] = ()
    secrets: tuple[SecretSpec, ...] = ()

    @property
    def is_empty(self) -> bool:
        return not (self.claims or self.secrets)


@dataclass(frozen=True, slots=True)
class VolumeMount:
    """A project claim mounted into a workload's container."""

    claim_name: str
    mount_path: str
    read_only: bool = False


@dataclass(frozen=True, slots=True)
class SecretEnvVar:
    """An environment variable read from a key of a Secret in the namespace."""

    name: str
    secret_name: str
    key: str


@dataclass(frozen=True, slots=True)
class WorkloadRoute:
    """How people reach a notebook or service: one Ingress whose external auth asks the portal,
    or (`kind="httproute"`) a Gateway API HTTPRoute on the gateway `gateway_namespace/
    gateway_name`, whose own policy must make the same check.

    `host` ("" for any host) and `path` (`/w/812/`) are where it is served; `auth_url` is the
    portal's check for this request (`.../auth/workloads/812/`: 200 lets the call through, 401
    sends the browser to `signin_url`). `strip_prefix` removes `path` before the call reaches
    the pod (services); notebooks keep it, they are started with it as their base URL.
    """

    path: str
    auth_url: str
    signin_url: str
    host: str = ""
    ingress_class: str | None = None
    tls_secret: str | None = None
    strip_prefix: bool = False
    kind: RouteKind = "ingress"
    gateway_name: str = ""
    gateway_namespace: str = ""
    gateway_section: str = ""

    def __post_init__(self) -> None:
        if self.kind == "httproute" and not self.gateway_name:
            raise ValueError("an HTTPRoute needs the gateway's name")
        if not (self.path.startswith("/") and self.path.endswith("/")):
            raise ValueError(f"route path {self.path!r} must start and end with '/'")
        if not self.auth_url.startswith(("http://", "https://")):
            raise ValueError(f"auth URL {self.auth_url!r} must be absolute")


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
class WorkloadSpec:
    """What to run for one attempt of one GPU request, already placed by the portal.

    `node_name` is set when the portal chose the node; `None` lets the cluster's scheduler pick a
    node within the pool that `node_selector` and `tolerations` describe. `gpu_products` pins
    the GPU model: the pod may only land on nodes whose `nvidia.com/gpu.product` label is one of
    them (see `gpu_models.gpu_products_for`). `gpu_count` counts whole cards (exclusive), vGPU
    shares (vgpu) or MIG instances of `mig_profile` (mig).

    `gang` (two members or more, jobs with whole cards only) runs the job as one pod per member,
    rank 0 first, each on its member's node with its member's cards; `gpu_count` is their sum.
    `device_indexes` are the cards the portal chose on `node_name` (vGPU: HAMi is asked for
    them); `gpu_uuids` and `gpu_types` are those cards as HAMi registered them, filled in by the
    backend at launch.

    `queue_name` (SCHEDULER=kueue, jobs only) hands the Job to Kueue: created suspended in that
    LocalQueue, with `priority_class_name` as its WorkloadPriorityClass; Kueue resumes it.

    `allocation="dra"` (whole cards only) asks for the cards with a ResourceClaimTemplate
    (`dra_manifests`) instead of the `nvidia.com/gpu` extended resource.
    """

    request_id: str
    attempt: int
    team_slug: str
    project_slug: str
    namespace: str
    kind: WorkloadKind
    image: str
    sharing: SharingMode
    gpu_count: int
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    vgpu_memory_mib: int | None = None
    vgpu_cores_percent: int | None = None
    mig_profile: str | None = None
    cpu: str | None = None
    memory: str | None = None
    scheduler_name: str = "default-scheduler"
    node_selector: Mapping[str, str] = field(default_factory=dict)
    gpu_products: tuple[str, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    node_name: str | None = None
    priority_class_name: str | None = None
    queue_name: str | None = None
    max_runtime_seconds: int | None = None
    port: int | None = None
    owner: str = ""
    reason: str = ""
    extra_labels: Mapping[str, str] = field(default_factory=dict)
    extra_annotations: Mapping[str, str] = field(default_factory=dict)
    gang: tuple[GangMember, ...] = ()
    device_indexes: tuple[int, ...] = ()
    gpu_uuids: tuple[str, ...] = ()
    gpu_types: tuple[str, ...] = ()
    route: WorkloadRoute | None = None
    volumes: tuple[VolumeMount, ...] = ()
    secret_env: tuple[SecretEnvVar, ...] = ()
    image_pull_secrets: tuple[str, ...] = ()
    shm_mib: int | None = None
    allocation: DeviceAllocation = "device-plugin"

    def __post_init__(self) -> None:
        workload_name(self.request_id, self.attempt)  # validates both
        if self.allocation not in ("device-plugin", "dra"):
            raise ValueError(f"unknown device allocation {self.allocation!r}")
        if self.allocation == "dra" and self.sharing != "exclusive":
            raise ValueError("Dynamic Resource Allocation gives whole cards only")
        if self.route is not None and self.kind not in RESUMABLE_KINDS:
            raise ValueError("only notebooks and services get a route")
        if self.queue_name is not None and (self.kind != "job" or self.gang):
            raise ValueError("only single-pod jobs are handed to Kueue")
        if self.gang:
            self._check_gang()
        if not is_dns_label(self.namespace):
            raise ValueError(f"namespace {self.namespace!r} is not a DNS-1123 label")
        for slug in (self.team_slug, self.project_slug):
            if not slug or not is_label_value(slug):
                raise ValueError(f"slug {slug!r} is not a valid label value")
        if self.kind not in WORKLOAD_KINDS:
            raise ValueError(f"unknown workload kind {self.kind!r}")
        if self.sharing not in SHARING_MODES:
            raise ValueError(f"unknown sharing mode {self.sharing!r}")
        if not self.image:
            raise ValueError("image is required")
        if self.gpu_count < 0 or (self.sharing != "exclusive" and self.gpu_count < 1):
            raise ValueError(f"gpu_count {self.gpu_count} is invalid for {self.sharing}")
        if self.sharing == "mig":
            if not self.mig_profile or not _MIG_PROFILE.match(self.mig_profile):
                raise ValueError(
                    f"mig sharing needs a MIG profile like 1g.10gb, not {self.mig_profile!r}"
                )
        elif self.mig_profile is not None:
            raise ValueError("mig_profile is only for mig sharing")
        if self.sharing != "vgpu" and (
            self.vgpu_memory_mib is not None or self.vgpu_cores_percent is not None
        ):
            raise ValueError("vgpu_memory_mib and vgpu_cores_percent are only for vgpu sharing")
        if self.vgpu_memory_mib is not None and self.vgpu_memory_mib < 1:
            raise ValueError("vgpu_memory_mib must be positive")
        if self.vgpu_cores_percent is not None and not 1 <= self.vgpu_cores_percent <= 100:
            raise ValueError("vgpu_cores_percent must be 1-100")
        if self.max_runtime_seconds is not None and self.max_runtime_seconds < 1:
            raise ValueError("max_runtime_seconds must be positive")
        if self.port is not None and not 1 <= self.port <= 65535:
            raise ValueError(f"port {self.port} is out of range")
        if self.shm_mib is not None and self.shm_mib < 1:
            raise ValueError("shm_mib must be positive")
        paths = [v.mount_path for v in self.volumes]
        if len(set(paths)) != len(paths):
            raise ValueError("two volumes share a mount path")

    def _check_gang(self) -> None:
        if len(self.gang) < 2:
            raise ValueError("a gang has two members or more")
        if self.kind != "job" or self.sharing != "exclusive":
            raise ValueError("only jobs on whole cards run as gangs")
        if sum(m.gpu_count for m in self.gang) != self.gpu_count:
            raise ValueError("a gang's members must hold gpu_count cards between them")
        if any(m.gpu_count < 1 for m in self.gang):
            raise ValueError("every gang member holds at least one card")
        nodes = [m.node_name for m in self.gang if m.node_name is not None]
        if len(set(nodes)) != len(nodes):
            raise ValueError("gang members are on different nodes")

    @property
    def name(self) -> str:
        return workload_name(self.request_id, self.attempt)

    @property
    def service_port(self) -> int:
        """The port a notebook or service listens on: 8888 (Jupyter) or 8080 by default."""
        if self.port is not None:
            return self.port
        return 8888 if self.kind == "notebook" else 8080


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
    order for a gang) and `exit_code` the main container's last exit, once it has exited.
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
    profile (`1g.10gb`) to its allocatable count.
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


class ClusterError(Exception):
    """Any failure talking to the cluster. `status` is the HTTP status when there was one."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        reason: str = "",
        retry_after_seconds: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.reason = reason
        self.retry_after_seconds = retry_after_seconds


class TransientClusterError(ClusterError):
    """Worth retrying with backoff: timeouts, refused connections, 429, 5xx, update conflicts."""


class PermanentClusterError(ClusterError):
    """Retrying will not help: invalid objects (422), forbidden (403), a name owned by others."""


class ClusterBackend(Protocol):
    """What the portal needs from a cluster. Every method is safe to call twice.

    Implementations: `kubernetes` (the real API) and `simulated` (the demo fleet). Errors are
    `TransientClusterError` (the Celery layer retries with jittered backoff) or
    `PermanentClusterError`; implementations do not retry by themselves.
    """

    def sync_inventory(self) -> list[NodeInventory]:
        """Every node with its GPUs, labels, taints and allocatable resources."""
        ...

    def ensure_priority_classes(self, specs: Sequence[PrioritySpec]) -> None:
        """Create or converge the portal's PriorityClasses."""
        ...

    def ensure_project(self, spec: ProjectSpec) -> None:
        """Create or adopt the project's namespace, quota and limit range, converging drift."""
        ...

    def ensure_project_data(self, spec: ProjectDataSpec) -> None:
        """Create the project's claims and Secrets, grow a claim asked bigger and replace a
        Secret whose revision is older; a repeat changes nothing."""
        ...

    def remove_project_data(self, namespace: str, kind: str, names: Sequence[str]) -> None:
        """Delete the named PersistentVolumeClaims or Secrets (`kind`); gone is done."""
        ...

    def launch(self, spec: WorkloadSpec) -> str:
        """Create the workload and return its name; a repeat adopts what exists."""
        ...

    def terminate(
        self,
        namespace: str,
        request_id: str,
        attempt: int,
        *,
        reason: str,
        grace_seconds: int = 30,
    ) -> None:
        """Delete the workload and its pods; already gone counts as success."""
        ...

    def set_deadline(
        self, namespace: str, request_id: str, attempt: int, *, max_runtime_seconds: int
    ) -> None:
        """Give a running workload a new max runtime, counted from its start as at launch: a
        Job's `activeDeadlineSeconds` (every rank of a gang) is patched, so the cluster stops
        it at the new deadline, not the first; gone counts as done."""
        ...

    def scale_to_zero(self, namespace: str, request_id: str, attempt: int, *, reason: str) -> bool:
        """Reclaim without losing the workload: a notebook or service keeps its Deployment and
        Service at zero replicas (its pods, and so its GPUs, are released) and True is returned;
        anything else (a Job) is terminated and False returned. Repeats keep the replica count
        recorded by the first call."""
        ...

    def resume(self, spec: WorkloadSpec) -> str | None:
        """Take over the scaled-to-zero workload of an earlier attempt of `spec`'s request as
        `spec.attempt`, placed as `spec` says, and scale it back to its recorded replicas.

        Returns the workload's name, or None when there is nothing to resume (the caller then
        launches afresh). `launch` of a notebook or service calls this first; a repeat finds the
        workload already taken over and returns its name again.
        """
        ...

    def get_workload(self, namespace: str, request_id: str, attempt: int) -> WorkloadStatus:
        """The status of one workload, `missing` when nothing of it exists."""
        ...

    def list_workloads(self, namespaces: Sequence[str] | None = None) -> list[WorkloadStatus]:
        """Every workload carrying the portal's labels (all namespaces when `None`)."""
        ...

    def read_logs(
        self,
        namespace: str,
        request_id: str,
        attempt: int,
        *,
        tail: int = 100,
        follow: bool = False,
        since: datetime | None = None,
    ) -> Iterator[LogLine]:
        """The last `tail` lines of every pod of the attempt (only those after `since` when
        given), oldest first; with `follow`, keep yielding new lines until the pods end or the
        caller stops iterating. No pod yet is no lines, not an error."""
        ...

    def list_events(self, namespace: str, request_id: str, attempt: int) -> list[ClusterEvent]:
        """The cluster's events about the attempt's objects (Job, Deployment, pods), oldest
        first."""
        ...


@runtime_checkable
class WatchableClusterBackend(ClusterBackend, Protocol):
    """A backend that can also stream changes instead of being polled."""

    def watch_workloads(
        self, resource_version: str | None = None, *, timeout_seconds: int = 300
    ) -> Iterator[WorkloadEvent]:
        """Yield changes after `resource_version`; yields `resync` and carries on after 410."""
        ...
