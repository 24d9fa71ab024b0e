"""Reads of requests, quotas and the GPU catalogue."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Count, Exists, Max, OuterRef, Q, QuerySet, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from scheduling.choices import (
    COMMITTED_STATUSES,
    FlavorKind,
    RequestStatus,
    SharingMode,
    WorkloadKind,
)
from scheduling.engine.forecast import RatioBand, blend, ratio_band
from scheduling.engine.reserve import format_duration
from scheduling.models import (
    MIG_SLICES_PER_GPU,
    Allocation,
    Flavor,
    GpuDevice,
    GpuRequest,
    NodePool,
    Quota,
    ReclaimPolicy,
    Tier,
    UtilisationSample,
)
from scheduling.reclaim_rules import idle_verdict
from tenants.choices import Role
from tenants.models import AuditEvent, Project, Team, scope_of


def committed_units(*, flavor: Flavor, team: Team, project: Project | None = None) -> int:
    """Units of the flavor asked for and not yet given back, by the team or one project."""
    requests = GpuRequest.objects.filter(flavor=flavor, team=team, status__in=COMMITTED_STATUSES)
    if project is not None:
        requests = requests.filter(project=project)
    return int(requests.aggregate(total=Sum("gpu_count"))["total"] or 0)


def committed_by_quota_key(
    team_ids: set[int] | None = None,
) -> dict[tuple[int, int | None, int], int]:
    """Units asked for and not yet given back, keyed as quotas are: per (team, project, flavor)
    and per (team, None, flavor). One grouped query; `team_ids=None` reads every team."""
    requests = GpuRequest.objects.filter(status__in=COMMITTED_STATUSES)
    if team_ids is not None:
        requests = requests.filter(team_id__in=team_ids)
    rows = (
        requests.values_list("team_id", "project_id", "flavor_id")
        .annotate(total=Sum("gpu_count"))
        .order_by()
    )
    used: dict[tuple[int, int | None, int], int] = {}
    for team_id, project_id, flavor_id, total in rows:
        for key in ((team_id, project_id, flavor_id), (team_id, None, flavor_id)):
            used[key] = used.get(key, 0) + int(total)
    return used


@dataclass(frozen=True, slots=True)
class QuotaUsage:
    """Units of one quota key, counted one way on every page: `used` is held by admitted,
    launching or running work, `queued` is approved and waiting (or preempted and back in the
    queue), `borrowed` is the part of `used` above the guarantee that may be preempted.
    `used + queued` is what counts against the limit (COMMITTED_STATUSES)."""

    used: int = 0
    queued: int = 0
    borrowed: int = 0

    @property
    def committed(self) -> int:
        return self.used + self.queued


HOLDING_STATUSES = frozenset(
    {RequestStatus.ADMITTED, RequestStatus.LAUNCHING, RequestStatus.RUNNING}
)


def quota_usage(
    team_ids: set[int] | None = None,
) -> dict[tuple[int, int | None, int], QuotaUsage]:
    """Used, queued and borrowed units keyed as quotas are: per (team, project, flavor) and per
    (team, None, flavor). Two grouped queries; `team_ids=None` reads every team."""
    requests = GpuRequest.objects.filter(status__in=COMMITTED_STATUSES)
    if team_ids is not None:
        requests = requests.filter(team_id__in=team_ids)
    sums: dict[tuple[int, int | None, int], list[int]] = {}

    def add(team_id: int, project_id: int, flavor_id: int, column: int, units: int) -> None:
        for key in ((team_id, project_id, flavor_id), (team_id, None, flavor_id)):
            sums.setdefault(key, [0, 0, 0])[column] += int(units)

    rows = (
        requests.values_list("team_id", "project_id", "flavor_id", "status")
        .annotate(total=Sum("gpu_count"))
        .order_by()
    )
    for team_id, project_id, flavor_id, status, total in rows:
        add(team_id, project_id, flavor_id, 0 if status in HOLDING_STATUSES else 1, total)
    borrowed = (
        requests.filter(
            status__in=HOLDING_STATUSES,
            allocations__ended_at__isnull=True,
            allocations__is_borrowed=True,
        )
        .values_list("team_id", "project_id", "flavor_id")
        .annotate(total=Sum("gpu_count"))
        .order_by()
    )
    for team_id, project_id, flavor_id, total in borrowed:
        add(team_id, project_id, flavor_id, 2, total)
    return {key: QuotaUsage(*values) for key, values in sums.items()}


@dataclass(frozen=True, slots=True)
class ProjectSplit:
    project: Project
    flavor_id: int
    quota: Quota | None
    usage: QuotaUsage

    @property
    def key(self) -> str:
        return f"{self.project.pk}-{self.flavor_id}"


@dataclass(frozen=True, slots=True)
class TeamQuotaRow:
    """One team quota for a flavor, its usage and its split over the team's projects."""

    quota: Quota
    usage: QuotaUsage
    can_split: bool
    splits: list[ProjectSplit]


def quota_rows(*, user: Any) -> list[TeamQuotaRow]:
    """The team quotas the user sees (their teams; every team for admins), with usage."""
    scope = scope_of(user)
    visible = Quota.objects.visible_to(user).select_related("flavor", "project", "team")
    if not scope.is_platform_admin:
        visible = visible.filter(team_id__in=scope.team_ids)
    quotas = list(visible.prefetch_related("team__projects").order_by("team__name", "flavor__name"))
    splits = {(q.project_id, q.flavor_id): q for q in quotas if q.project_id is not None}
    usage = quota_usage({q.team_id for q in quotas})
    none = QuotaUsage()
    return [
        TeamQuotaRow(
            quota=team_quota,
            usage=usage.get((team_quota.team_id, None, team_quota.flavor_id), none),
            can_split=scope.is_lead_of(team_quota.team_id),
            splits=[
                ProjectSplit(
                    project=project,
                    flavor_id=team_quota.flavor_id,
                    quota=splits.get((project.pk, team_quota.flavor_id)),
                    usage=usage.get((team_quota.team_id, project.pk, team_quota.flavor_id), none),
                )
                for project in team_quota.team.projects.all()
            ],
        )
        for team_quota in quotas
        if team_quota.project_id is None
    ]


@dataclass(frozen=True, slots=True)
class QuotaStanding:
    """Where a project stands against its quota for one flavor (team and project levels)."""

    team_guaranteed: int
    team_limit: int
    team_committed: int
    project_guaranteed: int | None
    project_limit: int | None
    project_committed: int

    def fits_guaranteed(self, units: int) -> bool:
        team_ok = self.team_committed + units <= self.team_guaranteed
        if self.project_guaranteed is None:
            return team_ok
        return team_ok and self.project_committed + units <= self.project_guaranteed

    def fits_limit(self, units: int) -> bool:
        team_ok = self.team_committed + units <= self.team_limit
        if self.project_limit is None:
            return team_ok
        return team_ok and self.project_committed + units <= self.project_limit

    @property
    def max_ever(self) -> int:
        """The most units one request could ever get, with nothing else running."""
        if self.project_limit is None:
            return self.team_limit
        return min(self.team_limit, self.project_limit)

    @property
    def left_guaranteed(self) -> int:
        left = self.team_guaranteed - self.team_committed
        if self.project_guaranteed is not None:
            left = min(left, self.project_guaranteed - self.project_committed)
        return max(0, left)

    @property
    def left_limit(self) -> int:
        left = self.team_limit - self.team_committed
        if self.project_limit is not None:
            left = min(left, self.project_limit - self.project_committed)
        return max(0, left)


def quota_standing(*, project: Project, flavor: Flavor, lock: bool = False) -> QuotaStanding | None:
    """The quota standing, or None when the team has no quota for the flavor.

    With `lock`, the team's quota rows for the flavor are locked (SELECT … FOR UPDATE) until the
    transaction ends, so concurrent approvals for the same team and flavor are decided one
    after another. The committed sums are read after the locks are held, in a second query, so
    they see what the transactions we waited for committed.
    """
    quotas = Quota.objects.filter(team_id=project.team_id, flavor=flavor).order_by("id")
    if lock:
        quotas = quotas.select_for_update()
    team_quota = project_quota = None
    for project_id, guaranteed, limit in quotas.values_list("project_id", "guaranteed", "limit"):
        if project_id is None:
            team_quota = (guaranteed, limit)
        elif project_id == project.pk:
            project_quota = (guaranteed, limit)
    if team_quota is None:
        return None
    committed = GpuRequest.objects.filter(
        flavor=flavor, team_id=project.team_id, status__in=COMMITTED_STATUSES
    ).aggregate(
        team=Coalesce(Sum("gpu_count"), 0),
        project=Coalesce(Sum("gpu_count", filter=Q(project=project)), 0),
    )
    return QuotaStanding(
        team_guaranteed=team_quota[0],
        team_limit=team_quota[1],
        team_committed=int(committed["team"]),
        project_guaranteed=project_quota[0] if project_quota else None,
        project_limit=project_quota[1] if project_quota else None,
        project_committed=int(committed["project"]),
    )


def tier_allowed_for_project(*, tier: Tier, project: Project) -> bool:
    """A team must be allowed the tier; a project narrows it only if it lists tiers at all."""
    project_links = Tier.allowed_projects.through.objects.filter(project_id=project.pk)
    return (
        Tier.objects.filter(pk=tier.pk, allowed_teams=project.team_id)
        .filter(~Exists(project_links) | Exists(project_links.filter(tier_id=OuterRef("pk"))))
        .exists()
    )


def flavors_for_project(*, project: Project) -> QuerySet[Flavor]:
    """Active flavors in tiers the project may use and for which its team has a quota."""
    flavors = Flavor.objects.filter(
        is_active=True,
        pool__tier__allowed_teams=project.team,
        quotas__team=project.team,
        quotas__project__isnull=True,
    ).select_related("pool", "pool__tier")
    project_tiers = Tier.objects.filter(allowed_projects=project)
    if project_tiers.exists():
        flavors = flavors.filter(pool__tier__in=project_tiers)
    return flavors.distinct()


@dataclass(frozen=True, slots=True)
class PoolCapacity:
    """The largest shapes the pool's schedulable nodes can hold, for request validation."""

    max_gpus_per_node: int
    total_gpus: int
    max_device_memory_mib: int
    mig_slices_total: dict[str, int]
    mig_slices_per_node_max: dict[str, int]


def pool_capacity(*, flavor: Flavor) -> PoolCapacity:
    """Counted in the database, one row back whatever the pool's size.

    Only MIG flavors read the devices' slice layouts, which are JSON and summed here.
    """
    devices = GpuDevice.objects.filter(
        node__pool=flavor.pool_id, node__is_schedulable=True, node__gpu_model=flavor.gpu_model
    )
    per_node = devices.values("node_id").annotate(gpus=Count("id"), node_memory=Max("memory_mib"))
    shape = per_node.aggregate(busiest=Max("gpus"), total=Sum("gpus"), memory=Max("node_memory"))
    busiest, total, memory = shape["busiest"], shape["total"], shape["memory"]
    mig_total: dict[str, int] = {}
    mig_node: dict[tuple[int, str], int] = {}
    if flavor.kind == FlavorKind.MIG:
        for node_id, layout in devices.values_list("node_id", "mig_layout"):
            for profile, count in (layout or {}).items():
                mig_total[profile] = mig_total.get(profile, 0) + int(count)
                mig_node[(node_id, profile)] = mig_node.get((node_id, profile), 0) + int(count)
    mig_node_max: dict[str, int] = {}
    for (_, profile), count in mig_node.items():
        mig_node_max[profile] = max(mig_node_max.get(profile, 0), count)
    return PoolCapacity(
        max_gpus_per_node=int(busiest or 0),
        total_gpus=int(total or 0),
        max_device_memory_mib=int(memory or 0),
        mig_slices_total=mig_total,
        mig_slices_per_node_max=mig_node_max,
    )


def team_leads(*, team: Team) -> list[Any]:
    """The active leads of a team: whom approvals and asks are sent to."""
    return list(
        get_user_model().objects.filter(
            memberships__team=team, memberships__role=Role.TEAM_LEAD, is_active=True
        )
    )


def approval_inbox(*, user: Any) -> QuerySet[GpuRequest]:
    """Requests waiting for this user's decision: their teams' pending ones (all, for admins)."""
    scope = scope_of(user)
    pending = GpuRequest.objects.filter(status=RequestStatus.PENDING_APPROVAL)
    if not scope.is_platform_admin:
        pending = pending.filter(team_id__in=scope.lead_team_ids)
    return pending.select_related("owner", "project", "flavor", "team").order_by("created_at")


ASK_ACTIONS = {
    "request.asked_extension": "extension",
    "request.asked_idle_exemption": "idle_exemption",
}
GRANT_ACTIONS = {"request.extended": "extension", "request.idle_exemption": "idle_exemption"}
DEFERRED_APPROVAL_ACTION = "request.approval_deferred"


@dataclass(frozen=True, slots=True)
class OpenAsk:
    """An owner's ask for a longer runtime or an idle exemption that no lead answered yet."""

    request: GpuRequest
    about: str  # "extension" or "idle_exemption"
    reason: str
    asked_at: datetime
    asked_by: Any


def open_asks(*, user: Any) -> list[OpenAsk]:
    """Asks on the live work of the user's teams (every team, for admins) still unanswered:
    the latest ask of each kind per request, if no grant of that kind came after it."""
    scope = scope_of(user)
    events = AuditEvent.objects.filter(
        target_type="GpuRequest", action__in=[*ASK_ACTIONS, *GRANT_ACTIONS]
    )
    if not scope.is_platform_admin:
        events = events.filter(team_id__in=scope.lead_team_ids)
    live = GpuRequest.objects.filter(
        status__in=(RequestStatus.RUNNING, RequestStatus.LAUNCHING)
    ).values_list("pk", flat=True)
    events = events.filter(target_id__in=[str(pk) for pk in live])
    latest_ask: dict[tuple[str, str], Any] = {}
    latest_grant: dict[tuple[str, str], datetime] = {}
    for event in events.select_related("actor").order_by("occurred_at", "id"):
        if event.action in ASK_ACTIONS:
            latest_ask[(event.target_id, ASK_ACTIONS[event.action])] = event
        else:
            latest_grant[(event.target_id, GRANT_ACTIONS[event.action])] = event.occurred_at
    unanswered = [
        (key, event)
        for key, event in latest_ask.items()
        if key not in latest_grant or latest_grant[key] < event.occurred_at
    ]
    requests = GpuRequest.objects.select_related("owner", "project", "flavor", "team").in_bulk(
        [int(target_id) for (target_id, _), _ in unanswered]
    )
    return [
        OpenAsk(requests[int(target_id)], about, event.message, event.occurred_at, event.actor)
        for (target_id, about), event in sorted(unanswered, key=lambda item: item[1].occurred_at)
    ]


def deferred_approvals() -> QuerySet[GpuRequest]:
    """Pending requests a lead approved to run once quota frees, oldest first. The audit events
    are read for the pending requests only, so the read stays as small as the inbox."""
    pending = [
        str(pk)
        for pk in GpuRequest.objects.filter(status=RequestStatus.PENDING_APPROVAL).values_list(
            "pk", flat=True
        )
    ]
    deferred = AuditEvent.objects.filter(
        target_type="GpuRequest", action=DEFERRED_APPROVAL_ACTION, target_id__in=pending
    ).values_list("target_id", flat=True)
    return GpuRequest.objects.filter(
        status=RequestStatus.PENDING_APPROVAL, pk__in=[int(pk) for pk in deferred]
    ).order_by("created_at", "pk")


def deferring_lead(request: GpuRequest) -> Any:
    """The lead who last approved `request` to run when quota frees, or None."""
    event = (
        AuditEvent.objects.filter(
            target_type="GpuRequest", target_id=str(request.pk), action=DEFERRED_APPROVAL_ACTION
        )
        .select_related("actor")
        .order_by("-occurred_at", "-id")
        .first()
    )
    return event.actor if event else None


@dataclass(frozen=True, slots=True)
class QuotaImpact:
    """What approving one pending request does to its quota: units in use before and after
    against the guaranteed share and the limit, and why approval is blocked, if it is."""

    units: int
    committed: int
    guaranteed: int
    limit: int
    borrows: bool
    blocked_reason: str

    @property
    def after(self) -> int:
        return self.committed + self.units


def quota_impact(*, gpu_request: GpuRequest, standing: QuotaStanding | None = None) -> QuotaImpact:
    """The quota impact of approving `gpu_request`, at the tighter of team and project level."""
    standing = standing or quota_standing(project=gpu_request.project, flavor=gpu_request.flavor)
    units = gpu_request.gpu_count
    if standing is None:
        return QuotaImpact(units, 0, 0, 0, False, "the team has no quota for this flavor")
    project_level = standing.project_limit is not None and (
        standing.project_limit - standing.project_committed
        < standing.team_limit - standing.team_committed
    )
    committed = standing.project_committed if project_level else standing.team_committed
    guaranteed = (
        standing.project_guaranteed
        if project_level and standing.project_guaranteed is not None
        else standing.team_guaranteed
    )
    limit = int(standing.project_limit or 0) if project_level else standing.team_limit
    blocked = ""
    if not standing.fits_limit(units):
        free_needed = units - standing.left_limit
        blocked = (
            f"approving it would pass the quota limit ({committed} of {limit} "
            f"{gpu_request.flavor} in use); {free_needed} must free up first"
        )
    return QuotaImpact(
        units=units,
        committed=committed,
        guaranteed=guaranteed,
        limit=limit,
        borrows=not standing.fits_guaranteed(units),
        blocked_reason=blocked,
    )


@dataclass(frozen=True, slots=True)
class PoolOverview:
    pool: str
    sharing_mode: str
    gpus: int
    allocated_gpu_equivalents: float
    stranded_gpu_equivalents: float
    activity_percent: float | None
    queued: int
    wait_p50_seconds: float | None
    wait_p90_seconds: float | None
    wait_p99_seconds: float | None
    # Lifecycle isolation: the pool's short-request reserve and whether it works, i.e. the
    # waits of short requests (max runtime up to the pool's threshold) against long ones.
    short_reserve: str = ""
    short_wait_p50_seconds: float | None = None
    short_wait_p90_seconds: float | None = None
    long_wait_p50_seconds: float | None = None
    long_wait_p90_seconds: float | None = None


def _percentile(values: list[float], fraction: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def fleet_overview(*, since_days: int = 7) -> list[PoolOverview]:
    """Per pool: capacity, what is allocated, what is stranded, how busy, how long work waits.

    Stranded capacity is free capacity no flavor of the pool can use: vGPU memory or cores left
    on a shared card below the smallest share, MIG slices fewer than the smallest profile.
    """
    now = timezone.now()
    active = list(Allocation.objects.active().select_related("request", "pool").order_by("pk"))
    used_memory: dict[tuple[str, int], int] = {}
    used_cores: dict[tuple[str, int], int] = {}
    used_slices: dict[tuple[str, int], int] = {}
    for allocation in active:
        for claim in allocation.claims:
            key = (claim["node"], claim["device_index"])
            if claim.get("mig_profile"):
                slices = int(str(claim["mig_profile"]).split("g.", 1)[0])
                used_slices[key] = used_slices.get(key, 0) + slices
            elif not claim.get("whole"):
                used_memory[key] = used_memory.get(key, 0) + claim.get("memory_mib", 0)
                used_cores[key] = used_cores.get(key, 0) + claim.get("cores_percent", 0)
    latest: dict[int, float] = {}
    for allocation_id, activity in (
        UtilisationSample.objects.filter(
            allocation__in=active, sampled_at__gt=now - timedelta(minutes=10)
        )
        .order_by("allocation_id", "sampled_at")
        .values_list("allocation_id", "activity_percent")
    ):
        latest[allocation_id] = activity
    pools = list(NodePool.objects.order_by("slug"))
    waits_by_length = recent_admission_waits(
        pools={p.pk: p for p in pools}, since=now - timedelta(days=since_days)
    )
    overview = []
    for pool in pools:
        flavors = list(pool.flavors.filter(is_active=True))
        devices = list(GpuDevice.objects.filter(node__pool=pool).select_related("node"))
        smallest_memory = min(
            (f.gpu_memory_mib for f in flavors if f.kind == FlavorKind.VGPU), default=0
        )
        smallest_cores = min(
            (f.gpu_cores_percent for f in flavors if f.kind == FlavorKind.VGPU), default=0
        )
        smallest_slices = min(
            (int(f.mig_profile.split("g.", 1)[0]) for f in flavors if f.kind == FlavorKind.MIG),
            default=MIG_SLICES_PER_GPU,
        )
        stranded = 0.0
        for device in devices:
            key = (device.node.name, device.index)
            if pool.sharing_mode == SharingMode.VGPU and key in used_memory:
                free_memory = device.memory_mib - used_memory[key]
                free_cores = 100 - used_cores.get(key, 0)
                if free_memory < smallest_memory or free_cores < smallest_cores:
                    stranded += min(free_memory / device.memory_mib, free_cores / 100)
            elif pool.sharing_mode == SharingMode.MIG and key in used_slices:
                free_slices = MIG_SLICES_PER_GPU - used_slices[key]
                if free_slices < smallest_slices:
                    stranded += free_slices / MIG_SLICES_PER_GPU
        in_pool = [a for a in active if a.pool_id == pool.pk]
        activities = [latest[a.pk] for a in in_pool if a.pk in latest]
        short_waits = waits_by_length.get((pool.pk, True), [])
        long_waits = waits_by_length.get((pool.pk, False), [])
        waits = short_waits + long_waits
        overview.append(
            PoolOverview(
                pool=pool.slug,
                sharing_mode=pool.sharing_mode,
                gpus=len(devices),
                allocated_gpu_equivalents=round(
                    sum(float(a.request.gpu_equivalent) for a in in_pool), 3
                ),
                stranded_gpu_equivalents=round(stranded, 3),
                activity_percent=round(sum(activities) / len(activities), 1)
                if activities
                else None,
                queued=GpuRequest.objects.filter(
                    status=RequestStatus.QUEUED, flavor__pool=pool
                ).count(),
                wait_p50_seconds=_percentile(waits, 0.5),
                wait_p90_seconds=_percentile(waits, 0.9),
                wait_p99_seconds=_percentile(waits, 0.99),
                short_reserve=pool.short_reserve_label,
                short_wait_p50_seconds=_percentile(short_waits, 0.5),
                short_wait_p90_seconds=_percentile(short_waits, 0.9),
                long_wait_p50_seconds=_percentile(long_waits, 0.5),
                long_wait_p90_seconds=_percentile(long_waits, 0.9),
            )
        )
    return overview


@dataclass(frozen=True, slots=True)
class GovernanceRules:
    """The reclamation rules that apply to one request, and where it stands on them now.

    Shown on the request page so that owners see the rule and the countdown before anything
    is reclaimed ("visible to users"), computed with the same pure rules the reclaim pass uses.
    """

    idle_rule: str
    idle_reclaim_at: datetime | None
    idle_seconds: float
    stops_at: datetime | None
    timeout_rule: str
    retry_rule: str
    short_reserve: str


def governance_rules(*, gpu_request: GpuRequest, now: datetime | None = None) -> GovernanceRules:
    """Idle, timeout and retry rules of the request's tier, with its idle and runtime deadlines."""
    now = now or timezone.now()
    pool = gpu_request.flavor.pool
    policy = ReclaimPolicy.objects.filter(tier_id=pool.tier_id).first() or ReclaimPolicy()
    window = (
        policy.notebook_idle_window_seconds
        if gpu_request.kind == WorkloadKind.NOTEBOOK
        else policy.idle_window_seconds
    )
    idle_rule = (
        f"GPU activity under {policy.idle_threshold_percent}% for {format_duration(window)}: "
        f"warned {format_duration(policy.idle_warning_seconds)} before, then "
        + ("reclaimed" if policy.reclaim_idle else "reported (reclaim is off for this tier)")
        + (
            "; notebooks and services can be resumed"
            if gpu_request.kind != WorkloadKind.JOB
            else ""
        )
    )
    timeout_rule = (
        f"stopped at its max runtime ({format_duration(gpu_request.max_runtime_seconds)}), "
        f"warned {format_duration(policy.timeout_warning_seconds)} before; "
        "your lead can extend it"
    )
    retry_rule = (
        "preempted work goes back to the queue with its original age; work lost to a node "
        f"failure or a stuck start is retried up to {policy.max_attempts} attempts"
    )
    allocation = (
        Allocation.objects.active().filter(request=gpu_request, started_at__isnull=False).first()
    )
    idle_reclaim_at: datetime | None = None
    idle_seconds = 0.0
    stops_at: datetime | None = None
    if allocation is not None and allocation.started_at is not None:
        stops_at = allocation.started_at + timedelta(seconds=gpu_request.max_runtime_seconds)
        samples = [
            (moment.timestamp(), activity)
            for moment, activity in UtilisationSample.objects.filter(
                allocation=allocation, sampled_at__gte=now - timedelta(seconds=window * 2)
            )
            .order_by("sampled_at")
            .values_list("sampled_at", "activity_percent")
        ]
        verdict = idle_verdict(
            samples,
            now=now.timestamp(),
            started_at=allocation.started_at.timestamp(),
            threshold_percent=policy.idle_threshold_percent,
            window_seconds=window,
            warning_seconds=policy.idle_warning_seconds,
            warned_at=gpu_request.idle_warned_at.timestamp()
            if gpu_request.idle_warned_at
            else None,
            exempt_until=gpu_request.idle_exempt_until.timestamp()
            if gpu_request.idle_exempt_until
            else None,
        )
        if verdict.stage in ("warn", "reclaim") and verdict.reclaim_at is not None:
            idle_reclaim_at = datetime.fromtimestamp(verdict.reclaim_at, tz=UTC)
        idle_seconds = verdict.idle_seconds
    return GovernanceRules(
        idle_rule=idle_rule,
        idle_reclaim_at=idle_reclaim_at,
        idle_seconds=idle_seconds,
        stops_at=stops_at,
        timeout_rule=timeout_rule,
        retry_rule=retry_rule,
        short_reserve=pool.short_reserve_label,
    )


def recent_admission_waits(
    *, pools: dict[int, NodePool], since: datetime
) -> dict[tuple[int, bool], list[float]]:
    """Queue waits (seconds) of the work admitted to these pools since `since`, keyed by
    (pool id, is short): short means a max runtime up to the pool's short-request threshold."""
    waits: dict[tuple[int, bool], list[float]] = {}
    for pool_id, admitted, queued_at, runtime in Allocation.objects.filter(
        pool_id__in=pools, admitted_at__gt=since
    ).values_list("pool_id", "admitted_at", "request__queued_at", "request__max_runtime_seconds"):
        if queued_at is not None and admitted >= queued_at:
            short = runtime <= pools[pool_id].short_max_runtime_seconds
            waits.setdefault((pool_id, short), []).append((admitted - queued_at).total_seconds())
    return waits


#: Statuses whose run ended by itself or by its owner: their runtimes say how long work runs.
RAN_TO_AN_END = (
    RequestStatus.SUCCEEDED,
    RequestStatus.FAILED,
    RequestStatus.CANCELLED,
    RequestStatus.RECLAIMED,
)


@dataclass(frozen=True, slots=True)
class RuntimeHistory:
    """How actual runtimes compared with the declared max runtime lately, by owner and flavor.

    `band_for` blends the owner's and the flavor's ratio bands (engine/forecast.py): little
    history stays close to "runs its declared max".
    """

    by_owner: dict[int, RatioBand]
    by_flavor: dict[int, RatioBand]

    def band_for(self, *, owner_id: int, flavor_id: int) -> RatioBand:
        return blend(self.by_owner.get(owner_id), self.by_flavor.get(flavor_id))


def runtime_history(
    *, now: datetime | None = None, since_days: int = 90, limit: int = 20_000
) -> RuntimeHistory:
    """Ratio actual/declared runtime of the runs that ended in the last `since_days` days
    (the newest `limit`), as bands per owner and per flavor."""
    now = now or timezone.now()
    by_owner: dict[int, list[float]] = {}
    by_flavor: dict[int, list[float]] = {}
    rows = (
        GpuRequest.objects.filter(
            status__in=RAN_TO_AN_END,
            started_at__isnull=False,
            finished_at__gt=now - timedelta(days=since_days),
            max_runtime_seconds__gt=0,
        )
        .order_by("-finished_at")
        .values_list("owner_id", "flavor_id", "started_at", "finished_at", "max_runtime_seconds")
    )[:limit]
    for owner_id, flavor_id, started_at, finished_at, declared in rows:
        if finished_at < started_at:
            continue
        ratio = (finished_at - started_at).total_seconds() / declared
        by_owner.setdefault(owner_id, []).append(ratio)
        by_flavor.setdefault(flavor_id, []).append(ratio)
    return RuntimeHistory(
        by_owner={k: ratio_band(v) for k, v in by_owner.items()},
        by_flavor={k: ratio_band(v) for k, v in by_flavor.items()},
    )


def ratio_bands_by_request(
    request_ids: list[int], *, history: RuntimeHistory
) -> dict[str, RatioBand]:
    """The blended ratio band of each request, keyed as the engine names requests (str pk)."""
    return {
        str(pk): history.band_for(owner_id=owner_id, flavor_id=flavor_id)
        for pk, owner_id, flavor_id in GpuRequest.objects.filter(pk__in=request_ids).values_list(
            "pk", "owner_id", "flavor_id"
        )
    }
