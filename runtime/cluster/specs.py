"""What the portal asks a cluster for: the value types of projects and workloads.

`WorkloadSpec` is one attempt of one request, already placed by the portal; `ProjectSpec`,
`ProjectDataSpec` and `PrioritySpec` are what a project's namespace and the cluster must hold.
Plain Python (no Django, no Kubernetes client), validated on construction. Units are in the
names: `*_mib` is MiB, `*_percent` is 0-100 of one GPU, `*_seconds` is seconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from runtime.cluster.names import is_dns_label, is_label_value, workload_name
from scheduling.engine.mig import all_profile_names

WorkloadKind = Literal["job", "notebook", "service"]
SharingMode = Literal["exclusive", "vgpu", "mig"]
PreemptionPolicy = Literal["PreemptLowerPriority", "Never"]
TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
VolumeAccessMode = Literal["ReadWriteMany", "ReadWriteOnce"]
SecretType = Literal["Opaque", "kubernetes.io/dockerconfigjson"]
RouteKind = Literal["ingress", "httproute"]
#: How a pod asks for its cards: the device plugin's `nvidia.com/gpu`, or a ResourceClaim (DRA).
DeviceAllocation = Literal["device-plugin", "dra"]

WORKLOAD_KINDS: tuple[WorkloadKind, ...] = ("job", "notebook", "service")
SHARING_MODES: tuple[SharingMode, ...] = ("exclusive", "vgpu", "mig")
RESUMABLE_KINDS: tuple[WorkloadKind, ...] = ("notebook", "service")
#: Where a project's workspace and a member's home volume are mounted.
WORKSPACE_MOUNT_PATH = "/workspace"
HOME_MOUNT_PATH = "/home/jovyan"


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
    `ingress_namespace` is the ingress controller's namespace: the only one whose pods may reach
    the project's workloads ("" lets none in; see `project_manifests.network_policy_manifests`).
    """

    team_slug: str
    project_slug: str
    namespace: str
    quota: Mapping[str, int | str] = field(default_factory=dict)
    limit_range: LimitRangeSpec = field(default_factory=LimitRangeSpec)
    ingress_namespace: str = ""

    def __post_init__(self) -> None:
        if not is_dns_label(self.namespace):
            raise ValueError(f"namespace {self.namespace!r} is not a DNS-1123 label")
        if self.ingress_namespace and not is_dns_label(self.ingress_namespace):
            raise ValueError(f"namespace {self.ingress_namespace!r} is not a DNS-1123 label")
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

    `host` (`812.workloads.example.org`; "" for any host) and `path` (the portal uses `/`) are
    where it is served; `auth_url` is the portal's check for this request
    (`.../auth/workloads/812/`: 200 lets the call through, 401 sends the browser to
    `signin_url`). `strip_prefix` removes `path` before the call reaches the pod (services);
    notebooks keep it, they are started with it as their base URL.

    `portal_service_host` (the portal's in-cluster DNS name) and `portal_service_port`, when
    set, give the workload's host a second route: `/_portal/` to the portal, without the check,
    through an ExternalName Service. That is where the browser turns the portal's one-use link
    into the workload's own cookie (docs/security.md, "Workload origins").
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
    portal_service_host: str = ""
    portal_service_port: int = 80

    def __post_init__(self) -> None:
        if self.portal_service_host and not self.host:
            raise ValueError("the portal's callback route needs the workload's own host")
        if self.kind == "httproute" and not self.gateway_name:
            raise ValueError("an HTTPRoute needs the gateway's name")
        if not (self.path.startswith("/") and self.path.endswith("/")):
            raise ValueError(f"route path {self.path!r} must start and end with '/'")
        if not self.auth_url.startswith(("http://", "https://")):
            raise ValueError(f"auth URL {self.auth_url!r} must be absolute")


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """What to run for one attempt of one GPU request, already placed by the portal.

    `node_name` is set when the portal chose the node; `None` lets the cluster's scheduler pick a
    node within the pool that `node_selector` and `tolerations` describe. `gpu_products` pins
    the GPU model: the pod may only land on nodes whose `nvidia.com/gpu.product` label is one of
    them (see `gpu_models.gpu_products_for`). `gpu_count` counts whole cards (exclusive), vGPU
    shares (vgpu) or MIG instances of `mig_profile` (mig).

    `gang` (two members or more, jobs with whole cards only, the same card count each) runs the
    job as one indexed Job with a pod per member, held to the members' nodes, one per node;
    `gpu_count` is their sum.
    `device_indexes` are the cards the portal chose on `node_name` (vGPU: HAMi is asked for
    them); `gpu_uuids` and `gpu_types` are those cards as HAMi registered them, filled in by the
    backend at launch.

    `queue_name` (SCHEDULER=kueue, jobs only) hands the Job to Kueue: created suspended in that
    LocalQueue, with `priority_class_name` as its WorkloadPriorityClass; Kueue resumes it.

    `allocation="dra"` (whole cards only) asks for the cards with a ResourceClaimTemplate
    (`dra_manifests`) instead of the `nvidia.com/gpu` extended resource.

    `fs_group` owns the pod's volumes (a non-root image can write its workspace);
    `run_as_non_root` makes the kubelet refuse an image that would run as root
    (`pod_manifests.pod_security_context`).
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
    # How long the work may wait for a node: a Job's deadline counts from the Job's start, so at
    # creation it is the max runtime plus this, and `set_deadline` makes it the max runtime from
    # when the pod runs.
    start_allowance_seconds: int = 0
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
    #: A notebook's Jupyter token: written to its own Secret, never into the Deployment.
    notebook_token: str | None = field(default=None, repr=False)
    fs_group: int | None = None
    run_as_non_root: bool = False
    #: The pods' `terminationGracePeriodSeconds`: the tier's preemption grace, so that the
    #: garbage collector, a drain or the portal's own delete give the same time to checkpoint.
    termination_grace_seconds: int = 30

    def __post_init__(self) -> None:
        workload_name(self.request_id, self.attempt)  # validates both
        if self.allocation not in ("device-plugin", "dra"):
            raise ValueError(f"unknown device allocation {self.allocation!r}")
        if self.allocation == "dra" and self.sharing != "exclusive":
            raise ValueError("Dynamic Resource Allocation gives whole cards only")
        if self.route is not None and self.kind not in RESUMABLE_KINDS:
            raise ValueError("only notebooks and services get a route")
        if self.notebook_token is not None and (self.kind != "notebook" or not self.notebook_token):
            raise ValueError("only a notebook has a token, and it is not empty")
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
            if not self.mig_profile or self.mig_profile not in all_profile_names():
                raise ValueError(
                    f"mig sharing needs a MIG profile like 1g.10gb (one of the MIG table's), "
                    f"not {self.mig_profile!r}"
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
        if self.start_allowance_seconds < 0:
            raise ValueError("start_allowance_seconds must not be negative")
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
        if len({m.gpu_count for m in self.gang}) != 1:
            raise ValueError("every gang member holds the same count of cards")
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
