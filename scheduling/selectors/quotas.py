"""Reads of quotas: the units committed per quota key, the team quotas a user sees and their
split over projects, where a project stands against its quota, and what approving a
request does to it."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from django.db.models import Sum

from scheduling.choices import COMMITTED_STATUSES, RequestStatus
from scheduling.engine.quota import quota_unit
from scheduling.models import Flavor, GpuRequest, Quota
from tenants.models import Project, Team, scope_of


def committed_units(*, flavor: Flavor, team: Team, project: Project | None = None) -> int:
    """Units of the flavor asked for and not yet given back, by the team or one project."""
    requests = GpuRequest.objects.filter(flavor=flavor, team=team, status__in=COMMITTED_STATUSES)
    if project is not None:
        requests = requests.filter(project=project)
    return int(requests.aggregate(total=Sum("gpu_count"))["total"] or 0)


def flavor_unit(flavor: Flavor) -> str:
    """The unit a flavor's quota and usage are counted in, named (GPUs, vGPU shares or MIG
    instances); the engine's blocker sentences use the same names."""
    return quota_unit(flavor.kind)


@dataclass(frozen=True, slots=True)
class QuotaUsage:
    """Units of one quota key, counted one way on every page, in the API and in gpuctl:
    `used` is held by admitted, launching or running work, `queued` is approved and waiting (or
    preempted and back in the queue), `borrowed` is the part of `used` above the guarantee that
    may be preempted. `used + queued` is what counts against the limit (COMMITTED_STATUSES)."""

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

    @property
    def unit(self) -> str:
        return flavor_unit(self.quota.flavor)


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
    # Summed per project of the team (a grouped query costs less to build than two filtered sums).
    committed: dict[int, int] = dict(
        GpuRequest.objects.filter(
            flavor=flavor, team_id=project.team_id, status__in=COMMITTED_STATUSES
        )
        .values_list("project_id")
        .annotate(units=Sum("gpu_count"))
        .order_by()
    )
    return QuotaStanding(
        team_guaranteed=team_quota[0],
        team_limit=team_quota[1],
        team_committed=sum(committed.values()),
        project_guaranteed=project_quota[0] if project_quota else None,
        project_limit=project_quota[1] if project_quota else None,
        project_committed=committed.get(project.pk, 0),
    )


@dataclass(frozen=True, slots=True)
class QuotaImpact:
    """What approving one pending request does to its quota: units in use before and after
    against the guaranteed share and the limit, and why approval is blocked, if it is.

    In a queue of pending requests, `ahead` counts the units of the requests above this one
    that the same quota would hold if they were approved first; `committed` includes them.
    `passes_limit_after_ahead` says the request fits on its own but not after those above."""

    units: int
    committed: int
    guaranteed: int
    limit: int
    borrows: bool
    blocked_reason: str
    ahead: int = 0
    passes_limit_after_ahead: bool = False

    @property
    def after(self) -> int:
        return self.committed + self.units


def quota_impact(
    *,
    gpu_request: GpuRequest,
    standing: QuotaStanding | None = None,
    ahead_team: int = 0,
    ahead_project: int = 0,
) -> QuotaImpact:
    """The quota impact of approving `gpu_request`, at the tighter of team and project level.

    `ahead_team` and `ahead_project` are units of pending requests queued before this one for
    the same flavor (in its team, and in its project): the figures then show the quota as it
    would stand after approving all of them; whether approval is blocked now is still decided
    on the quota as it stands."""
    standing = standing or quota_standing(project=gpu_request.project, flavor=gpu_request.flavor)
    units = gpu_request.gpu_count
    if standing is None:
        return QuotaImpact(units, 0, 0, 0, False, "the team has no quota for this flavor")
    queued = replace(
        standing,
        team_committed=standing.team_committed + ahead_team,
        project_committed=standing.project_committed + ahead_project,
    )
    project_level = queued.project_limit is not None and (
        queued.project_limit - queued.project_committed < queued.team_limit - queued.team_committed
    )
    committed = queued.project_committed if project_level else queued.team_committed
    guaranteed = (
        queued.project_guaranteed
        if project_level and queued.project_guaranteed is not None
        else queued.team_guaranteed
    )
    limit = int(queued.project_limit or 0) if project_level else queued.team_limit
    blocked = ""
    if not standing.fits_limit(units):
        in_use = standing.project_committed if project_level else standing.team_committed
        free_needed = units - standing.left_limit
        blocked = (
            f"approving it would pass the quota limit ({in_use} of {limit} "
            f"{gpu_request.flavor} in use); {free_needed} must free up first"
        )
    return QuotaImpact(
        units=units,
        committed=committed,
        guaranteed=guaranteed,
        limit=limit,
        borrows=not queued.fits_guaranteed(units),
        blocked_reason=blocked,
        ahead=(ahead_project if project_level else ahead_team),
        passes_limit_after_ahead=not blocked and not queued.fits_limit(units),
    )


def queue_quota_impacts(*, gpu_requests: Sequence[GpuRequest]) -> dict[int, QuotaImpact]:
    """The quota impact of each pending request if every request above it in `gpu_requests`
    (queue order) were approved first: two requests of 2 on 2 of 8 in use read 2 → 4 and
    4 → 6, not 2 → 4 twice. Requests blocked on their own add nothing for those below, as
    approving them is refused until quota frees. One standing is read per project and flavor."""
    standings: dict[tuple[int, int], QuotaStanding | None] = {}
    team_ahead: dict[tuple[int, int], int] = defaultdict(int)
    project_ahead: dict[tuple[int, int], int] = defaultdict(int)
    impacts: dict[int, QuotaImpact] = {}
    for gpu_request in gpu_requests:
        project_key = (gpu_request.project_id, gpu_request.flavor_id)
        team_key = (gpu_request.team_id, gpu_request.flavor_id)
        if project_key not in standings:
            standings[project_key] = quota_standing(
                project=gpu_request.project, flavor=gpu_request.flavor
            )
        standing = standings[project_key]
        if standing is None:
            impacts[gpu_request.pk] = quota_impact(gpu_request=gpu_request)
            continue
        impact = quota_impact(
            gpu_request=gpu_request,
            standing=standing,
            ahead_team=team_ahead[team_key],
            ahead_project=project_ahead[project_key],
        )
        impacts[gpu_request.pk] = impact
        if not impact.blocked_reason:
            team_ahead[team_key] += gpu_request.gpu_count
            project_ahead[project_key] += gpu_request.gpu_count
    return impacts
