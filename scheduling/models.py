"""GPU inventory (tiers, pools, nodes, devices), flavors, quotas, approval rules and requests."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from scheduling.choices import (
    DeviceAllocation,
    FlavorKind,
    Placement,
    Priority,
    RequestStatus,
    SchedulerMode,
    Scoring,
    SharingMode,
    WorkloadKind,
)
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
    # The most CPU, memory and /dev/shm one request may ask for here; empty: no maximum.
    max_cpu_millicores = models.PositiveIntegerField(null=True, blank=True)
    max_memory_mib = models.PositiveIntegerField(null=True, blank=True)
    max_shm_mib = models.PositiveIntegerField(null=True, blank=True)
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


LOCAL_CLUSTER_SLUG = "local"


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
    foreign_usage = models.JSONField(
        default=dict,
        blank=True,
        help_text="GPU resources held by pods the portal did not create, e.g. "
        '{"nvidia.com/gpu": 2}; subtracted from what the engine sees free.',
    )

    objects = CatalogQuerySet.as_manager()

    class Meta:
        ordering = ["pool__name", "name"]

    def __str__(self) -> str:
        return self.name


class GpuDevice(models.Model):
    """One physical GPU of a node; `mig_layout` counts its MIG slices by profile."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="devices")
    index = models.PositiveSmallIntegerField()
    memory_mib = models.PositiveIntegerField()
    mig_layout = models.JSONField(default=dict, blank=True)

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
    """Whole card = 1; MIG = its compute slices of 7; vGPU = the larger of memory and core share."""
    if kind == FlavorKind.WHOLE:
        return Decimal(1)
    if kind == FlavorKind.MIG:
        slices = int(mig_profile.split("g.", 1)[0]) if "g." in mig_profile else 1
        return (Decimal(slices) / MIG_SLICES_PER_GPU).quantize(Decimal("0.0001"))
    share = max(Decimal(memory_mib) / Decimal(card_memory_mib), Decimal(cores_percent) / 100)
    return min(Decimal(1), share).quantize(Decimal("0.0001"))


class QuotaQuerySet(ScopedQuerySet):
    def for_scope(self, scope: Scope) -> QuotaQuerySet:
        if scope.is_platform_admin:
            return self.all()
        return self.filter(team_id__in=scope.team_ids)


class Quota(models.Model):
    """A team's or a project's share of one flavor: guaranteed, and a limit reached by borrowing.

    A row without a project is the team's quota; a row with one is the project's part of it.
    Amounts count units of the flavor (cards, shares or slices).
    """

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="quotas")
    project = models.ForeignKey(
        Project, on_delete=models.CASCADE, related_name="quotas", null=True, blank=True
    )
    flavor = models.ForeignKey(Flavor, on_delete=models.CASCADE, related_name="quotas")
    guaranteed = models.PositiveIntegerField(default=0)
    limit = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    objects = QuotaQuerySet.as_manager()

    class Meta:
        ordering = ["team__name", "project__name", "flavor__name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(guaranteed__lte=F("limit")),
                name="quota_guaranteed_within_limit",
                violation_error_message="The guaranteed amount cannot exceed the limit.",
            ),
            models.UniqueConstraint(
                fields=["team", "flavor"],
                condition=Q(project__isnull=True),
                name="quota_one_per_team_flavor",
                violation_error_message="The team already has a quota for this flavor.",
            ),
            models.UniqueConstraint(
                fields=["project", "flavor"],
                condition=Q(project__isnull=False),
                name="quota_one_per_project_flavor",
                violation_error_message="The project already has a quota for this flavor.",
            ),
        ]

    def __str__(self) -> str:
        owner = self.project or self.team
        return f"{owner} {self.flavor}: {self.guaranteed}/{self.limit}"


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


class GpuRequestQuerySet(ScopedQuerySet):
    """Requests, scoped to who may see them."""

    def for_scope(self, scope: Scope) -> GpuRequestQuerySet:
        """Developers see their own requests, leads their team's, admins all; finance none."""
        if scope.is_platform_admin:
            return self.all()
        return self.filter(Q(team_id__in=scope.lead_team_ids) | Q(owner_id=scope.user_id)).filter(
            team_id__in=scope.team_ids
        )


class GpuRequest(models.Model):
    """One ask for GPUs by a developer, followed through its lifecycle (see choices.TRANSITIONS)."""

    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="gpu_requests")
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="gpu_requests")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="gpu_requests"
    )
    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="gpu_requests")
    name = models.CharField(
        max_length=80, blank=True, help_text="A short label shown in lists; optional."
    )
    gpu_count = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    gpu_memory_mib = models.PositiveIntegerField(null=True, blank=True)
    gpu_cores_percent = models.PositiveSmallIntegerField(null=True, blank=True)
    kind = models.CharField(max_length=10, choices=WorkloadKind.choices, default=WorkloadKind.JOB)
    image = models.CharField(max_length=255)
    command = models.JSONField(default=list, blank=True)
    env = models.JSONField(default=dict, blank=True)
    max_runtime_seconds = models.PositiveIntegerField()
    priority = models.CharField(max_length=10, choices=Priority.choices, default=Priority.NORMAL)
    is_preemptible = models.BooleanField(default=False)
    allow_shared_node = models.BooleanField(default=True)
    # Host resources, resolved at submit (the flavor's defaults fill what was not asked for).
    cpu_millicores = models.PositiveIntegerField(null=True, blank=True)
    memory_mib = models.PositiveIntegerField(null=True, blank=True)
    shm_mib = models.PositiveIntegerField(null=True, blank=True)
    home_volume = models.BooleanField(
        default=False, help_text="Mount the owner's home volume of the project (notebooks)."
    )
    secret_env = models.JSONField(
        default=list,
        blank=True,
        help_text='Variables read from project secrets: [{"name", "secret", "key"}].',
    )
    reason = models.TextField(blank=True)
    gpu_equivalent = models.DecimalField(max_digits=8, decimal_places=4)
    cluster = models.ForeignKey(
        Cluster,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="gpu_requests",
        help_text="Run only on this cluster; empty lets the engine choose among the pools.",
    )

    status = models.CharField(
        max_length=20, choices=RequestStatus.choices, default=RequestStatus.PENDING_APPROVAL
    )
    status_reason = models.TextField(blank=True)
    needs_lead_approval_because = models.TextField(blank=True)
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="approved_gpu_requests",
    )
    decision_comment = models.TextField(blank=True)
    approval_expires_at = models.DateTimeField(null=True, blank=True)
    waiting_reason = models.TextField(blank=True)
    # The kind of wait the last cycle found (the engine's WaitCode: quota, capacity, reservation,
    # reserved, invalid), and when capacity was reserved for it by backfilling, if it was: the
    # request page's estimated start comes from these, so it agrees with the reason.
    waiting_code = models.CharField(max_length=12, blank=True)
    reserved_start_at = models.DateTimeField(null=True, blank=True)
    # When the engine's forward run expects the request to start, and the interval around it
    # (docs/estimates.md); the most binding thing that keeps it waiting (docs/blockers.md).
    estimated_start_at = models.DateTimeField(null=True, blank=True)
    estimate_low_at = models.DateTimeField(null=True, blank=True)
    estimate_high_at = models.DateTimeField(null=True, blank=True)
    blocker = models.JSONField(default=dict, blank=True)
    queue_position = models.PositiveIntegerField(null=True, blank=True)
    attempt = models.PositiveIntegerField(default=0)
    idle_warned_at = models.DateTimeField(null=True, blank=True)
    idle_exempt_until = models.DateTimeField(null=True, blank=True)
    timeout_warned_at = models.DateTimeField(null=True, blank=True)

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    approved_at = models.DateTimeField(null=True, blank=True)
    queued_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = GpuRequestQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["status", "team"], name="gpu_request_status_team_idx"),
            models.Index(fields=["project", "flavor", "status"], name="gpu_request_usage_idx"),
            # The request list, newest first, for a developer (own) and a lead (team): a page
            # reads 50 index entries instead of sorting every request in scope.
            models.Index(
                "owner", F("created_at").desc(), F("id").desc(), name="gpu_request_owner_newest_idx"
            ),
            models.Index(
                "team", F("created_at").desc(), F("id").desc(), name="gpu_request_team_newest_idx"
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(gpu_count__gte=1),
                name="gpu_request_count_positive",
                violation_error_message="A request needs at least one GPU.",
            ),
        ]

    def __str__(self) -> str:
        return f"request {self.pk} ({self.flavor} × {self.gpu_count})"

    def as_audit_data(self) -> dict[str, Any]:
        return {"status": self.status, "flavor": self.flavor_id, "gpu_count": self.gpu_count}


# What a request and a template have in common: the body that a template fills in.
REQUEST_BODY_FIELDS = (
    "flavor",
    "gpu_count",
    "gpu_memory_mib",
    "gpu_cores_percent",
    "kind",
    "image",
    "command",
    "env",
    "max_runtime_seconds",
    "priority",
    "is_preemptible",
    "allow_shared_node",
    "cpu_millicores",
    "memory_mib",
    "shm_mib",
    "home_volume",
    "secret_env",
)


class RequestTemplateQuerySet(ScopedQuerySet):
    """Templates, scoped: one's own and one's teams' shared ones; admins see all."""

    def for_scope(self, scope: Scope) -> RequestTemplateQuerySet:
        if scope.is_platform_admin:
            return self.all()
        return self.filter(team_id__in=scope.team_ids).filter(
            Q(is_shared=True) | Q(owner_id=scope.user_id)
        )


class RequestTemplate(models.Model):
    """A saved request body (like a KubeSpawner profile): a user's own, or a team's shared one.

    A shared template is the team's: its lead (or a platform admin) writes it and every member
    sees it. A personal one is its owner's alone. Choosing one fills the request form; it holds
    no project, which the requester picks.
    """

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="request_templates")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="request_templates"
    )
    is_shared = models.BooleanField(
        default=False, help_text="Shared with the whole team (written by its lead)."
    )
    name = models.CharField(max_length=80)
    description = models.CharField(max_length=255, blank=True)
    flavor = models.ForeignKey(
        Flavor, on_delete=models.SET_NULL, null=True, blank=True, related_name="templates"
    )
    gpu_count = models.PositiveIntegerField(default=1, validators=[MinValueValidator(1)])
    gpu_memory_mib = models.PositiveIntegerField(null=True, blank=True)
    gpu_cores_percent = models.PositiveSmallIntegerField(null=True, blank=True)
    kind = models.CharField(max_length=10, choices=WorkloadKind.choices, default=WorkloadKind.JOB)
    image = models.CharField(max_length=255)
    command = models.JSONField(default=list, blank=True)
    env = models.JSONField(default=dict, blank=True)
    max_runtime_seconds = models.PositiveIntegerField(default=7200)
    priority = models.CharField(max_length=10, choices=Priority.choices, default=Priority.NORMAL)
    is_preemptible = models.BooleanField(default=False)
    allow_shared_node = models.BooleanField(default=True)
    cpu_millicores = models.PositiveIntegerField(null=True, blank=True)
    memory_mib = models.PositiveIntegerField(null=True, blank=True)
    shm_mib = models.PositiveIntegerField(null=True, blank=True)
    home_volume = models.BooleanField(default=False)
    secret_env = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = RequestTemplateQuerySet.as_manager()

    class Meta:
        ordering = ["-is_shared", "name", "id"]
        indexes = [models.Index(fields=["team", "is_shared"], name="request_template_team_idx")]

    def __str__(self) -> str:
        return self.name

    def as_audit_data(self) -> dict[str, Any]:
        return {"team": self.team_id, "is_shared": self.is_shared, "name": self.name}


class AllocationQuerySet(ScopedQuerySet):
    def for_scope(self, scope: Scope) -> AllocationQuerySet:
        if scope.is_platform_admin:
            return self.all()
        return self.filter(request__team_id__in=scope.team_ids)

    def active(self) -> AllocationQuerySet:
        return self.filter(ended_at__isnull=True)


class Allocation(models.Model):
    """The GPUs one attempt of a request holds, from admission until the work ends or is evicted.

    `claims` lists, per GPU, what the attempt holds: `{"node", "device_index", "whole",
    "memory_mib", "cores_percent", "mig_profile", "mig_start"}`. An empty list means the
    cluster's scheduler places the work inside the pool.
    """

    request = models.ForeignKey(GpuRequest, on_delete=models.CASCADE, related_name="allocations")
    attempt = models.PositiveIntegerField()
    pool = models.ForeignKey(NodePool, on_delete=models.PROTECT, related_name="allocations")
    claims = models.JSONField(default=list, blank=True)
    is_borrowed = models.BooleanField(default=False)
    is_preemptible = models.BooleanField(default=False)
    workload_name = models.CharField(max_length=63, blank=True)
    node_name = models.CharField(max_length=253, blank=True)
    admitted_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True, db_index=True)
    end_reason = models.CharField(max_length=200, blank=True)
    # What workload sync last saw of the attempt's pods: their names, the main container's exit
    # code and the last termination reason ("OOMKilled: container main exited with code 137").
    pod_names = models.JSONField(default=list, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    termination_reason = models.CharField(max_length=500, blank=True)

    objects = AllocationQuerySet.as_manager()

    class Meta:
        ordering = ["-admitted_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["request", "attempt"],
                name="allocation_one_per_attempt",
                violation_error_message="This attempt of the request is already allocated.",
            ),
        ]

    def __str__(self) -> str:
        return f"allocation of request {self.request_id} attempt {self.attempt}"


class SchedulerLease(models.Model):
    """A named lease that lets exactly one scheduling loop act at a time across all replicas."""

    name = models.CharField(max_length=60, unique=True)
    holder = models.CharField(max_length=120, blank=True)
    expires_at = models.DateTimeField()
    last_cycle_seconds = models.FloatField(default=0.0)

    def __str__(self) -> str:
        return f"{self.name} held by {self.holder or 'nobody'} until {self.expires_at}"


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


class UtilisationSample(models.Model):
    """GPU activity of one running allocation at one moment, from the metrics source."""

    allocation = models.ForeignKey(Allocation, on_delete=models.CASCADE, related_name="samples")
    sampled_at = models.DateTimeField()
    activity_percent = models.FloatField()
    memory_used_mib = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["allocation", "sampled_at"]
        indexes = [
            models.Index(fields=["allocation", "sampled_at"], name="utilisation_alloc_time_idx")
        ]

    def __str__(self) -> str:
        return f"{self.allocation_id} {self.sampled_at:%H:%M:%S} {self.activity_percent:.0f}%"


# Data: storage and secrets of a project ---------------------------------------------------


class TeamScopedQuerySet(ScopedQuerySet):
    """Rows of a team's projects: members of the team see them, admins all, finance none."""

    team_path = "project__team_id"

    def for_scope(self, scope: Scope) -> TeamScopedQuerySet:
        if scope.is_platform_admin:
            return self.all()
        return self.filter(**{f"{self.team_path}__in": scope.team_ids})


class StorageQuotaQuerySet(TeamScopedQuerySet):
    team_path = "team_id"


class StorageQuota(models.Model):
    """How many GiB of persistent volumes a team's projects may claim in all (admin-set):
    every project workspace and every home volume counts its size."""

    team = models.OneToOneField(Team, on_delete=models.CASCADE, related_name="storage_quota")
    limit_gib = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    objects = StorageQuotaQuerySet.as_manager()

    class Meta:
        ordering = ["team__name"]

    def __str__(self) -> str:
        return f"{self.team} storage: {self.limit_gib} GiB"

    def as_audit_data(self) -> dict[str, Any]:
        return {"team": self.team_id, "limit_gib": self.limit_gib}


class VolumeAccessMode(models.TextChoices):
    READ_WRITE_MANY = "ReadWriteMany", "shared by every pod (ReadWriteMany)"
    READ_WRITE_ONCE = "ReadWriteOnce", "one node at a time (ReadWriteOnce)"


class ProjectWorkspace(models.Model):
    """A project's shared PersistentVolumeClaim, mounted at /workspace in all its workloads;
    `home_size_gib` above zero also gives each member who asks a home volume for notebooks."""

    project = models.OneToOneField(Project, on_delete=models.CASCADE, related_name="workspace")
    storage_class = models.CharField(
        max_length=253, blank=True, help_text="Empty: the cluster's default storage class."
    )
    size_gib = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    access_mode = models.CharField(
        max_length=16, choices=VolumeAccessMode.choices, default=VolumeAccessMode.READ_WRITE_MANY
    )
    home_size_gib = models.PositiveIntegerField(
        default=0, help_text="Size of each member's home volume; 0 turns home volumes off."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = TeamScopedQuerySet.as_manager()

    class Meta:
        ordering = ["project__team__name", "project__name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(size_gib__gte=1),
                name="workspace_size_positive",
                violation_error_message="A workspace holds at least 1 GiB.",
            ),
        ]

    def __str__(self) -> str:
        return f"workspace of {self.project_id} ({self.size_gib} GiB)"

    def as_audit_data(self) -> dict[str, Any]:
        return {
            "project": self.project_id,
            "storage_class": self.storage_class,
            "size_gib": self.size_gib,
            "home_size_gib": self.home_size_gib,
        }


class HomeVolume(models.Model):
    """One member's home volume in a project, made the first time they ask for it; kept (and
    counted against the storage quota) until the workspace goes."""

    workspace = models.ForeignKey(
        ProjectWorkspace, on_delete=models.CASCADE, related_name="home_volumes"
    )
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    size_gib = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "user"],
                name="home_volume_one_per_user",
                violation_error_message="The user already has a home volume here.",
            ),
        ]

    def __str__(self) -> str:
        return f"home of {self.user_id} in workspace {self.workspace_id}"


class SecretKind(models.TextChoices):
    GENERIC = "generic", "key/value pairs"
    REGISTRY = "registry", "image registry login"


class ProjectSecret(models.Model):
    """Key/value secrets (or a registry login) a project's lead stores for its workloads.

    Values are write-only: `sealed_data` holds them encrypted (scheduling/sealing.py) only so
    the Kubernetes Secret can be made again in a re-created namespace; `keys` (and for a
    registry login `registry` and `username`) are all that is ever shown. `revision` grows on
    every write so the cluster's copy is replaced when it is older.
    """

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="secrets")
    name = models.SlugField(
        max_length=40, help_text="Lowercase letters, digits and '-'; referenced by requests."
    )
    kind = models.CharField(max_length=10, choices=SecretKind.choices, default=SecretKind.GENERIC)
    keys = models.JSONField(default=list, blank=True)
    registry = models.CharField(max_length=253, blank=True)
    username = models.CharField(max_length=253, blank=True)
    sealed_data = models.TextField(blank=True, editable=False)
    revision = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = TeamScopedQuerySet.as_manager()

    class Meta:
        ordering = ["project__team__name", "project__name", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["project", "name"],
                name="project_secret_name_unique",
                violation_error_message="The project already has a secret with this name.",
            ),
        ]

    def __str__(self) -> str:
        return f"secret {self.name} of project {self.project_id}"

    @property
    def cluster_name(self) -> str:
        """The Kubernetes Secret's name in the project namespace."""
        return f"gp-secret-{self.name}"

    def as_audit_data(self) -> dict[str, Any]:
        """What the audit trail may keep: names, never values."""
        return {"project": self.project_id, "name": self.name, "kind": self.kind, "keys": self.keys}
