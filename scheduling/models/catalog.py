"""The GPU catalogue: tiers, clusters, node pools, nodes and their GPUs, flavors, and the
rules a tier sets for its requests (approval) and its running work (reclaim)."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from scheduling.choices import (
    DeviceAllocation,
    FlavorKind,
    Placement,
    Priority,
    SchedulerMode,
    Scoring,
    SharingMode,
)
from scheduling.engine.mig import profile_problem, profile_share
from scheduling.engine.reserve import format_duration
from tenants.models import Project, ScopedQuerySet, Team
from tenants.scope import Scope


class CatalogQuerySet(ScopedQuerySet):
    """The GPU catalogue is the same for everyone signed in who has a role."""

    def for_scope(self, scope: Scope) -> CatalogQuerySet:
        if scope.sees_all_tenants or scope.team_ids:
            return self.all()
        return self.none()


class Tier(models.Model):
    """A scenario tier (dev, inference, training, …): what it is for and how long work may run."""

    name = models.CharField(max_length=40, unique=True)
    slug = models.SlugField(max_length=40, unique=True)
    description = models.TextField(blank=True)
    max_runtime_seconds = models.PositiveIntegerField(default=24 * 3600)
    rank = models.PositiveSmallIntegerField(
        default=0, help_text="Cost rank: the scheduler spends lower tiers first (0 = cheapest)."
    )
    lends_unassigned = models.BooleanField(
        default=True,
        help_text=(
            "Lend the cards of this tier's pools that no team is guaranteed: teams may borrow "
            "them up to their limits, as preemptible work that a guaranteed request takes back."
        ),
    )
    # The most CPU, memory and /dev/shm one request may ask for here; empty: no maximum.
    max_cpu_millicores = models.PositiveIntegerField(null=True, blank=True)
    max_memory_mib = models.PositiveIntegerField(null=True, blank=True)
    max_shm_mib = models.PositiveIntegerField(null=True, blank=True)
    preemption_grace_seconds = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MaxValueValidator(3600)],
        help_text="How long preempted work has between SIGTERM and SIGKILL to checkpoint; "
        "empty: the PREEMPTION_GRACE_SECONDS setting (30 s by default).",
    )
    allowed_teams = models.ManyToManyField(Team, blank=True, related_name="allowed_tiers")
    allowed_projects = models.ManyToManyField(
        Project,
        blank=True,
        related_name="allowed_tiers",
        help_text="Leave empty to let every project of an allowed team use the tier.",
    )

    objects = CatalogQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def preemption_grace(self) -> int:
        """Seconds a preempted workload of this tier gets between SIGTERM and SIGKILL."""
        if self.preemption_grace_seconds is not None:
            return self.preemption_grace_seconds
        return int(settings.PREEMPTION_GRACE_SECONDS)


LOCAL_CLUSTER_SLUG = "local"

#: The label that names a node's pool (`gpu-portal/pool=<pool slug>`).
POOL_LABEL = "gpu-portal/pool"


def validate_prometheus_url(value: str) -> None:
    """An http(s) base URL of Prometheus's HTTP API, with no credentials, query or fragment
    (the address is shown to platform admins; a token belongs in a proxy, not in the URL)."""
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError as error:
        raise ValidationError(f"Not a URL: {error}.") from error
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValidationError(
            "Give an http:// or https:// address with a host, e.g. "
            "http://prometheus-operated.monitoring.svc:9090."
        )
    if parts.username or parts.password:
        raise ValidationError("Put no credentials in the address: it is shown to admins.")
    if parts.query or parts.fragment:
        raise ValidationError("Give the base address only, without a query or fragment.")
    if port == 0:
        raise ValidationError("Port 0 is not a port.")


class Cluster(models.Model):
    """A Kubernetes cluster whose GPU pools the portal runs work on.

    The `local` cluster is the one this deployment's own settings name (CLUSTER_BACKEND,
    KUBECONFIG, SCHEDULER); every other cluster brings its kubeconfig, kept sealed
    (scheduling/sealing.py) and never shown again.
    """

    name = models.CharField(max_length=60, unique=True)
    slug = models.SlugField(max_length=40, unique=True)
    api_server = models.CharField(
        max_length=255, blank=True, help_text="The API server the kubeconfig points at."
    )
    kubeconfig_sealed = models.TextField(blank=True, editable=False)
    scheduler = models.CharField(
        max_length=10, choices=SchedulerMode.choices, default=SchedulerMode.PORTAL
    )
    is_active = models.BooleanField(
        default=True, help_text="An inactive cluster gets no new work; what runs there stays."
    )
    # Written by the per-cluster tasks: when the cluster last answered, and what failed since.
    last_contact_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)
    prometheus_url = models.CharField(
        "Prometheus URL",
        max_length=500,
        blank=True,
        validators=[validate_prometheus_url],
        help_text="The Prometheus that holds this cluster's DCGM exporter metrics, e.g. "
        "http://prometheus-operated.monitoring.svc:9090. Empty: the PROMETHEUS_URL setting.",
    )
    # Written by the utilisation poll (runtime/services/monitoring.py): the last poll that
    # brought GPU activity, since when it has flowed without a gap, and the gap if there is one.
    activity_signal_at = models.DateTimeField(null=True, blank=True, editable=False)
    activity_signal_since = models.DateTimeField(null=True, blank=True, editable=False)
    activity_gap_since = models.DateTimeField(null=True, blank=True, editable=False)
    activity_gap_reason = models.TextField(blank=True, editable=False)
    # What the last poll that brought activity saw, e.g. "8 GPUs on 2 hosts (NVIDIA L4)".
    activity_census = models.CharField(max_length=300, blank=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    objects = CatalogQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def is_local(self) -> bool:
        return not self.kubeconfig_sealed

    @property
    def is_simulated(self) -> bool:
        """The local cluster with CLUSTER_BACKEND=simulated: a fleet held in the database.
        Every other cluster is real (Kubernetes)."""
        return self.is_local and settings.CLUSTER_BACKEND == "simulated"

    @property
    def expects_activity_signal(self) -> bool:
        """A real cluster's GPU activity comes from Prometheus; only the simulated cluster makes
        up its own."""
        return not self.is_simulated

    @property
    def effective_prometheus_url(self) -> str:
        """The cluster's own Prometheus, else the PROMETHEUS_URL setting (may be empty)."""
        return self.prometheus_url or settings.PROMETHEUS_URL

    def has_fresh_activity_signal(self, *, now: datetime) -> bool:
        """Whether idle reclaim may act on this cluster's samples: no gap is open and the last
        activity is younger than ACTIVITY_SIGNAL_MAX_AGE_SECONDS (a simulated cluster: always)."""
        if not self.expects_activity_signal:
            return True
        max_age = timedelta(seconds=settings.ACTIVITY_SIGNAL_MAX_AGE_SECONDS)
        return (
            self.activity_gap_since is None
            and self.activity_signal_at is not None
            and self.activity_signal_at >= now - max_age
        )

    @property
    def scheduler_mode(self) -> str:
        """The local cluster follows the SCHEDULER setting; others their own field."""
        return settings.SCHEDULER if self.is_local else self.scheduler

    @property
    def is_reachable(self) -> bool:
        """False while the last contact failed (nothing heard since the last error)."""
        if self.last_error_at is None:
            return True
        return self.last_contact_at is not None and self.last_contact_at > self.last_error_at


def local_cluster_id() -> int:
    """This deployment's own cluster (a pool's when it names none), made on first use."""
    cluster, _ = Cluster.objects.get_or_create(
        slug=LOCAL_CLUSTER_SLUG, defaults={"name": "Local cluster"}
    )
    return cluster.pk


class NodePool(models.Model):
    """A set of GPU nodes with one tier, one sharing mode and one way of being scheduled."""

    name = models.CharField(max_length=60, unique=True)
    slug = models.SlugField(max_length=40, unique=True)
    tier = models.ForeignKey(Tier, on_delete=models.PROTECT, related_name="pools")
    # Left empty, the local cluster (set on save, not as a default: a default would query the
    # database whenever a pool object is made, saved or not).
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="pools", blank=True)
    sharing_mode = models.CharField(max_length=12, choices=SharingMode.choices)
    node_selector = models.JSONField(default=dict, blank=True)
    taints = models.JSONField(default=list, blank=True)
    scheduler_name = models.CharField(max_length=63, default="default-scheduler")
    placement = models.CharField(max_length=10, choices=Placement.choices, default=Placement.PORTAL)
    scoring = models.CharField(max_length=10, choices=Scoring.choices, default=Scoring.BINPACK)
    allocation = models.CharField(
        max_length=16,
        choices=DeviceAllocation.choices,
        default=DeviceAllocation.DEVICE_PLUGIN,
        help_text=(
            "How pods get their cards: the device plugin's nvidia.com/gpu, or a ResourceClaim "
            "(Dynamic Resource Allocation; whole cards only)."
        ),
    )
    allowed_kinds = models.JSONField(
        default=list, blank=True, help_text="Workload kinds allowed here; empty allows all."
    )
    # Lifecycle isolation: a share of the pool that long work may not take, so short requests
    # are not starved behind days-long jobs (see docs/engine.md, "Short-request reserve").
    short_reserve_fraction = models.FloatField(
        default=0.0,
        validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text=(
            "Share of the pool's GPUs (0-1) kept free for short requests: a request whose "
            "max runtime is above the threshold may not take capacity that would leave less "
            "free than this share. 0 turns the reserve off."
        ),
    )
    short_max_runtime_seconds = models.PositiveIntegerField(
        default=7200,
        validators=[MinValueValidator(1)],
        help_text="Requests with a max runtime up to this many seconds count as short.",
    )
    # A pilot pool serves only its pilot teams until `pilot_until`; its sharing report is the
    # evidence for widening it (docs/sharing-report.md).
    is_pilot = models.BooleanField(default=False)
    pilot_until = models.DateField(null=True, blank=True)
    pilot_teams = models.ManyToManyField(Team, blank=True, related_name="pilot_pools")

    objects = CatalogQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(short_reserve_fraction__gte=0) & Q(short_reserve_fraction__lte=1),
                name="node_pool_short_reserve_in_range",
                violation_error_message="The short-request reserve is a fraction between 0 and 1.",
            ),
            models.CheckConstraint(
                condition=Q(short_max_runtime_seconds__gte=1),
                name="node_pool_short_threshold_positive",
                violation_error_message="The short-request threshold must be at least 1 second.",
            ),
            models.CheckConstraint(
                condition=Q(allocation=DeviceAllocation.DEVICE_PLUGIN)
                | Q(sharing_mode=SharingMode.EXCLUSIVE),
                name="node_pool_dra_whole_cards",
                violation_error_message=(
                    "Dynamic Resource Allocation gives whole cards only: vGPU and MIG pools "
                    "use the device plugin."
                ),
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.cluster_id is None:
            self.cluster_id = local_cluster_id()
        super().save(*args, **kwargs)

    @property
    def node_labels(self) -> dict[str, str]:
        """The labels a node must carry to be one of this pool's: the pool label and the pool's
        node selector. Inventory matches nodes by them, and every pod and Kueue flavor of the
        pool selects them, so work never goes to a node the pool does not have."""
        return {**self.node_selector, POOL_LABEL: self.slug}

    def allows_kind(self, kind: str) -> bool:
        return not self.allowed_kinds or kind in self.allowed_kinds

    @property
    def short_reserve_label(self) -> str:
        """How the reserve reads to people ("keeps 20% for requests up to 2 h"), or ""."""
        if self.short_reserve_fraction <= 0:
            return ""
        return (
            f"keeps {self.short_reserve_fraction:.0%} for requests up to "
            f"{format_duration(self.short_max_runtime_seconds)}"
        )


class Node(models.Model):
    """A GPU node of a pool, as the cluster reports it (or as an admin entered it)."""

    pool = models.ForeignKey(NodePool, on_delete=models.CASCADE, related_name="nodes")
    name = models.CharField(max_length=253, unique=True)
    gpu_model = models.CharField(max_length=40)
    labels = models.JSONField(default=dict, blank=True)
    is_schedulable = models.BooleanField(default=True)
    unschedulable_since = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When the node stopped taking work (lost, NotReady, cordoned).",
    )
    synced_at = models.DateTimeField(null=True, blank=True)
    # When the portal first knew the node: its capacity is counted (idle cost) from then on.
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    held_back_reason = models.TextField(
        blank=True,
        help_text="Why the engine places nothing here although the node is up: it does not "
        "advertise the resources of its pool's sharing mode (inventory's access check).",
    )
    mig_layout_problem = models.TextField(
        blank=True,
        help_text="Why the node's MIG layout cannot be read from the cluster (its "
        "nvidia.com/mig.config label and nvidia.com/mig-* resources); empty when it can.",
    )
    foreign_usage = models.JSONField(
        default=dict,
        blank=True,
        help_text="Resources held by pods the portal did not create, e.g. "
        '{"nvidia.com/gpu": 2, "cpu_millicores": 4000, "memory_mib": 8192}; subtracted from '
        "what the engine sees free.",
    )
    # The node's allocatable host resources (its status); empty: not reported, and then they
    # do not limit placement.
    cpu_millicores = models.PositiveIntegerField(
        null=True, blank=True, help_text="Allocatable CPU in millicores, as the node reports it."
    )
    memory_mib = models.PositiveIntegerField(
        null=True, blank=True, help_text="Allocatable memory in MiB, as the node reports it."
    )

    objects = CatalogQuerySet.as_manager()

    class Meta:
        ordering = ["pool__name", "name"]

    def __str__(self) -> str:
        return self.name


class GpuDevice(models.Model):
    """One physical GPU of a node; `mig_layout` counts its MIG slices by profile;
    `vgpu_split_count` is how many vGPU shares HAMi lets it hold (0: no limit known)."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="devices")
    index = models.PositiveSmallIntegerField()
    memory_mib = models.PositiveIntegerField()
    mig_layout = models.JSONField(default=dict, blank=True)
    vgpu_split_count = models.PositiveSmallIntegerField(default=0)

    objects = CatalogQuerySet.as_manager()

    class Meta:
        ordering = ["node__name", "index"]
        constraints = [
            models.UniqueConstraint(
                fields=["node", "index"],
                name="gpu_device_index_unique_per_node",
                violation_error_message="The node already has a GPU with this index.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.node.name}/gpu{self.index}"


MIG_SLICES_PER_GPU = 7


class Flavor(models.Model):
    """What a request asks for and what quotas and prices count: a card, a vGPU share, a slice."""

    name = models.CharField(max_length=60, unique=True)
    slug = models.SlugField(max_length=40, unique=True)
    pool = models.ForeignKey(NodePool, on_delete=models.PROTECT, related_name="flavors")
    other_pools = models.ManyToManyField(
        NodePool,
        blank=True,
        related_name="other_flavors",
        help_text=(
            "The same cards in other pools (another cluster, say): the engine places a request "
            "in whichever of the flavor's pools fits, unless the request names a cluster."
        ),
    )
    kind = models.CharField(max_length=8, choices=FlavorKind.choices)
    gpu_model = models.CharField(max_length=40)
    gpu_memory_mib = models.PositiveIntegerField(
        help_text="Memory of one card (whole), the share's default (vGPU) or the slice (MIG)."
    )
    gpu_cores_percent = models.PositiveSmallIntegerField(
        default=100, validators=[MinValueValidator(1), MaxValueValidator(100)]
    )
    mig_profile = models.CharField(max_length=20, blank=True, help_text="e.g. 1g.10gb")
    gpu_equivalent = models.DecimalField(
        max_digits=6, decimal_places=4, help_text="Whole card = 1; used to add usage up."
    )
    is_active = models.BooleanField(default=True)
    # What a request of this flavor gets when it names no CPU, memory or /dev/shm; empty: the
    # namespace's LimitRange defaults (CPU, memory) and the runtime's 64 MiB /dev/shm.
    default_cpu_millicores = models.PositiveIntegerField(null=True, blank=True)
    default_memory_mib = models.PositiveIntegerField(null=True, blank=True)
    default_shm_mib = models.PositiveIntegerField(null=True, blank=True)

    objects = CatalogQuerySet.as_manager()

    class Meta:
        ordering = ["pool__name", "name"]
        constraints = [
            models.CheckConstraint(
                condition=~Q(kind=FlavorKind.MIG) | ~Q(mig_profile=""),
                name="flavor_mig_needs_profile",
                violation_error_message="A MIG flavor needs a MIG profile.",
            ),
            models.CheckConstraint(
                condition=Q(gpu_equivalent__gt=0) & Q(gpu_equivalent__lte=1),
                name="flavor_gpu_equivalent_in_range",
                violation_error_message="A flavor's GPU-equivalent weight is in (0, 1].",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        """A MIG flavor sells a profile its GPU model offers (the MIG table, engine/mig.py)."""
        super().clean()
        if self.kind == FlavorKind.MIG and self.mig_profile:
            problem = profile_problem(self.gpu_model, self.mig_profile)
            if problem:
                raise ValidationError({"mig_profile": problem})

    @property
    def resource_names(self) -> list[str]:
        """The Kubernetes extended resources a workload of this flavor asks for."""
        if self.kind == FlavorKind.MIG:
            return [f"nvidia.com/mig-{self.mig_profile}"]
        if self.kind == FlavorKind.VGPU:
            return ["nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores"]
        return ["nvidia.com/gpu"]


def gpu_equivalent_of(
    *,
    kind: str,
    card_memory_mib: int,
    memory_mib: int,
    cores_percent: int,
    mig_profile: str = "",
) -> Decimal:
    """Whole card = 1; MIG = its compute slices of the card's (7; 4 on the A30, as the MIG
    table says); vGPU = the larger of memory and core share."""
    if kind == FlavorKind.WHOLE:
        return Decimal(1)
    if kind == FlavorKind.MIG:
        slices, of = profile_share(mig_profile) or (1, MIG_SLICES_PER_GPU)
        return (Decimal(slices) / of).quantize(Decimal("0.0001"))
    share = max(Decimal(memory_mib) / Decimal(card_memory_mib), Decimal(cores_percent) / 100)
    return min(Decimal(1), share).quantize(Decimal("0.0001"))


class ApprovalRule(models.Model):
    """When requests in a tier are approved at once and when they wait for the team lead."""

    tier = models.OneToOneField(Tier, on_delete=models.CASCADE, related_name="approval_rule")
    auto_approve_within_guaranteed = models.BooleanField(default=True)
    auto_approve_max_priority = models.CharField(
        max_length=10, choices=Priority.choices, default=Priority.NORMAL
    )
    lead_approves_whole_cards = models.BooleanField(default=False)
    approval_ttl_hours = models.PositiveIntegerField(
        default=72, help_text="Requests not approved within this time expire."
    )

    objects = CatalogQuerySet.as_manager()

    def __str__(self) -> str:
        return f"approval rule for {self.tier}"


#: How far one Keep alive press pushes a notebook's idle deadline unless the policy says.
DEFAULT_KEEP_ALIVE_SECONDS = 60 * 60


class ReclaimPolicy(models.Model):
    """How a tier keeps shared GPUs from going to waste: idle, timeout and stuck-work rules.

    Idle work is warned `idle_warning_seconds` before it would be reclaimed, and reclaimed once
    its activity stayed under the threshold for the whole window.
    """

    tier = models.OneToOneField(Tier, on_delete=models.CASCADE, related_name="reclaim_policy")
    idle_threshold_percent = models.PositiveSmallIntegerField(default=5)
    idle_window_seconds = models.PositiveIntegerField(default=30 * 60)
    notebook_idle_window_seconds = models.PositiveIntegerField(default=60 * 60)
    idle_warning_seconds = models.PositiveIntegerField(default=10 * 60)
    idle_marks_preemptible = models.BooleanField(default=True)
    reclaim_idle = models.BooleanField(default=True)
    timeout_warning_seconds = models.PositiveIntegerField(default=15 * 60)
    pending_timeout_seconds = models.PositiveIntegerField(default=30 * 60)
    max_attempts = models.PositiveSmallIntegerField(
        default=3, help_text="Work lost to preemption, node failure or stuck starts is retried."
    )
    notebook_keep_alive_seconds = models.PositiveIntegerField(
        default=DEFAULT_KEEP_ALIVE_SECONDS,
        validators=[MaxValueValidator(24 * 3600)],
        help_text="How far ahead a notebook's owner may push its idle deadline with Keep alive "
        "(each press counts from that moment); 0: owners cannot, only the team lead exempts.",
    )

    objects = CatalogQuerySet.as_manager()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(idle_warning_seconds__lte=F("idle_window_seconds")),
                name="reclaim_warning_within_window",
                violation_error_message="The idle warning must come within the idle window.",
            ),
        ]

    def __str__(self) -> str:
        return f"reclaim policy for {self.tier}"


class NotebookProfile(models.Model):
    """A curated notebook server (like a JupyterHub profile): an image, the tiers it may run on,
    and the GPU shape it starts with.

    Once a tier has active profiles, notebooks in that tier run only their images; a tier
    without any lets notebooks run any image.
    """

    name = models.CharField(max_length=60, unique=True)
    image = models.CharField(max_length=255, help_text="The image reference, with its tag.")
    description = models.CharField(max_length=255, blank=True)
    tiers = models.ManyToManyField(
        Tier, related_name="notebook_profiles", help_text="The tiers it may run on."
    )
    flavor = models.ForeignKey(
        Flavor,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="notebook_profiles",
        help_text="The flavor it starts with, in one of its tiers; empty: the developer picks.",
    )
    gpu_count = models.PositiveSmallIntegerField(
        default=1, validators=[MinValueValidator(1), MaxValueValidator(64)], verbose_name="GPUs"
    )
    is_active = models.BooleanField(
        default=True, help_text="Offered on the request form and counted in the curated list."
    )

    objects = CatalogQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
