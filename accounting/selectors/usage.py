"""Reads of prices, usage and chargeback. The API and the dashboards both call these.

Team-level reports read the rollups (`TeamMonthlyUsage` when neither grouped nor filtered by
project, else `MonthlyUsage`; `DailyUsage` for series); only a developer's own usage
and per-user breakdowns read the ledger, through its (owner, period) and (team, period) indexes.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connections
from django.db.models import Count, Min, QuerySet, Subquery, Sum
from django.utils import timezone

from accounting.choices import HostResource
from accounting.models import (
    DailyUsage,
    MonthlyUsage,
    Price,
    ResourcePrice,
    TeamMonthlyUsage,
    UsageRecord,
    cost_of,
    hourly_rates,
)
from accounting.periods import billing_zone, month_bounds, month_of, next_month, seconds_between
from accounting.selectors.idle_sharing import (
    OFF,
    USAGE,
    IdleSharing,
    attach_to_rows,
    share_idle,
)
from scheduling.choices import FINISHED_STATUSES
from scheduling.models import (
    Allocation,
    Cluster,
    Flavor,
    GpuDevice,
    GpuRequest,
    NodePool,
    ProjectWorkspace,
)
from tenants.errors import DomainError, ForbiddenError, invalid_fields
from tenants.models import Project, Team, scope_of
from tenants.scope import Scope

SIX_PLACES = Decimal("0.000001")
SECONDS_PER_HOUR = Decimal(3600)
GROUP_KEYS = (
    "team",
    "project",
    "flavor",
    "pool",
    "cluster",
    "user",
    "request",
    "month",
    "day",
)
_COLUMN = {
    "team": "team_id",
    "project": "project_id",
    "flavor": "flavor_id",
    "pool": "pool_id",
    # A request's cluster is its allocation's pool's: usage is keyed by that pool.
    "cluster": "pool__cluster_id",
    "user": "owner_id",
    # Grouped by allocation in SQL, then merged per request (`_per_request`): the ledger's
    # allocation has no constraint, and a join would drop usage imported from other clusters.
    "request": "allocation_id",
}
LEDGER_KEYS = {"user", "request"}  # the rollups have neither: these read the ledger


def price_in_force(*, flavor: Flavor, at: datetime | None = None) -> Price | None:
    """The price of the flavor at a moment (now by default), or None if it was never priced."""
    return (
        Price.objects.filter(flavor=flavor, effective_from__lte=at or timezone.now())
        .order_by("-effective_from")
        .first()
    )


def resource_price_in_force(*, resource: str, at: datetime | None = None) -> ResourcePrice | None:
    """The CPU, memory or storage price at a moment (now by default), or None if unpriced."""
    return (
        ResourcePrice.objects.filter(resource=resource, effective_from__lte=at or timezone.now())
        .order_by("-effective_from")
        .first()
    )


def estimated_cost_per_hour(*, flavor: Flavor, gpu_count: int) -> tuple[Decimal, str] | None:
    """What a new request of `gpu_count` units of `flavor` with the flavor's default cores and
    memory will cost an hour, priced as the meter prices it; None when the flavor is unpriced."""
    price = price_in_force(flavor=flavor)
    if price is None:
        return None
    request = GpuRequest(
        flavor=flavor,
        gpu_count=gpu_count,
        cpu_millicores=flavor.default_cpu_millicores,
        memory_mib=flavor.default_memory_mib,
    )
    rates = hourly_rates(
        request=request,
        preemptible=False,
        price=price,
        cpu_price=resource_price_in_force(resource=HostResource.CPU),
        memory_price=resource_price_in_force(resource=HostResource.MEMORY),
    )
    return rates.total, price.currency


@dataclass(frozen=True, slots=True)
class RequestCost:
    """What one request has cost so far and what it will have cost if it runs to its max
    runtime (`projected` is None once it finished, and when its flavor has no price)."""

    so_far: Decimal
    projected: Decimal | None
    per_hour: Decimal | None
    currency: str


def request_cost(request: GpuRequest, *, now: datetime | None = None) -> RequestCost:
    """Cost so far and projected cost of a request, priced as the meter prices it.

    1. So far: the ledger of its allocations, plus the part of its live allocation the meter
       has not reached yet, at the price in force.
    2. Projected (not finished): so far plus the rest of its max runtime at that rate; a
       request not started yet counts its whole max runtime.
    """
    now = now or timezone.now()
    price = price_in_force(flavor=request.flavor, at=now)
    so_far = _money(
        UsageRecord.objects.filter(allocation__request=request).aggregate(c=Sum("cost"))["c"]
    )
    live = (
        Allocation.objects.filter(request=request, ended_at__isnull=True, started_at__isnull=False)
        .select_related("meter")
        .first()
    )
    rate: Decimal | None = None
    if price is not None:
        rate = hourly_rates(
            request=request,
            preemptible=live.is_preemptible if live is not None else request.is_preemptible,
            price=price,
            cpu_price=resource_price_in_force(resource=HostResource.CPU, at=now),
            memory_price=resource_price_in_force(resource=HostResource.MEMORY, at=now),
        ).total
    ran_seconds = Decimal(0)
    if live is not None and live.started_at is not None:
        metered = getattr(live, "meter", None)
        since = max(metered.metered_until, live.started_at) if metered else live.started_at
        ran_seconds = Decimal(max((now - live.started_at).total_seconds(), 0))
        if rate is not None:
            so_far += rate * Decimal(max((now - since).total_seconds(), 0)) / 3600
    projected: Decimal | None = None
    if rate is not None and request.status not in FINISHED_STATUSES:
        left = max(Decimal(request.max_runtime_seconds) - ran_seconds, Decimal(0))
        projected = so_far + rate * left / 3600
    currency = price.currency if price is not None else settings.PORTAL_CURRENCY
    return RequestCost(
        so_far=so_far.quantize(Decimal("0.01")),
        projected=projected.quantize(Decimal("0.01")) if projected is not None else None,
        per_hour=rate.quantize(Decimal("0.01")) if rate is not None else None,
        currency=currency,
    )


# Who sees what in reports -------------------------------------------------------------------

ALL, TEAMS, OWN = "all", "teams", "own"


def report_reach(scope: Scope) -> str:
    """Finance and admins report on every team, leads on their teams, developers on themselves."""
    if scope.sees_all_tenants:
        return ALL
    if scope.lead_team_ids:
        return TEAMS
    if scope.team_ids:
        return OWN
    raise ForbiddenError("no_role", "You need a role in a team to see usage.")


@dataclass(frozen=True, slots=True)
class UsageQuery:
    """One report's filters: months [month_from, month_to], optional ids, grouping keys."""

    month_from: date
    month_to: date
    team_id: int | None = None
    project_id: int | None = None
    pool_id: int | None = None
    flavor_id: int | None = None
    cluster_id: int | None = None
    user_id: int | None = None
    group_by: tuple[str, ...] = ("team",)
    months: list[date] = field(default_factory=list)

    def __post_init__(self) -> None:
        month, months = self.month_from, []
        while month <= self.month_to:
            months.append(month)
            month = next_month(month)
        object.__setattr__(self, "months", months)


def current_month(now: datetime | None = None) -> date:
    return month_of(now or timezone.now(), billing_zone())


def check_filters(*, user: Any, query: UsageQuery) -> None:
    """Ids in filters must be within the caller's reach, else they do not exist (400)."""
    scope = scope_of(user)
    reach = report_reach(scope)
    teams = Team.objects.all() if reach == ALL else Team.objects.filter(id__in=scope.team_ids)
    if reach == TEAMS:
        teams = teams.filter(id__in=scope.lead_team_ids)
    errors: dict[str, str] = {}
    if query.team_id is not None and not teams.filter(pk=query.team_id).exists():
        errors["team"] = "No such team."
    if (
        query.project_id is not None
        and not Project.objects.filter(pk=query.project_id, team__in=teams).exists()
    ):
        errors["project"] = "No such project."
    if query.pool_id is not None and not NodePool.objects.filter(pk=query.pool_id).exists():
        errors["pool"] = "No such pool."
    if query.flavor_id is not None and not Flavor.objects.filter(pk=query.flavor_id).exists():
        errors["flavor"] = "No such flavor."
    if query.cluster_id is not None and not Cluster.objects.filter(pk=query.cluster_id).exists():
        errors["cluster"] = "No such cluster."
    if query.user_id is not None and not _users_in_reach(scope, reach, teams, query.user_id):
        errors["user"] = "No such user."
    if errors:
        raise invalid_fields(errors)


def _users_in_reach(scope: Scope, reach: str, teams: QuerySet[Team], user_id: int) -> bool:
    """A developer reports on themselves; a lead on the members of their teams; finance and
    admins on anyone."""
    if reach == OWN:
        return user_id == scope.user_id
    users = get_user_model().objects.filter(pk=user_id)
    if reach == TEAMS:
        users = users.filter(memberships__team__in=teams)
    return users.exists()


def _source(*, scope: Scope, query: UsageQuery) -> tuple[QuerySet[Any], str]:
    """The cheapest table that answers the query, restricted to the caller, and its month column."""
    reach = report_reach(scope)
    wants_user = bool(LEDGER_KEYS & set(query.group_by)) or query.user_id is not None
    if "day" in query.group_by and (wants_user or reach == OWN):
        raise DomainError(
            "invalid",
            "Daily series are per team and project, not per user or request.",
            fields={
                "group_by": "'day' cannot be combined with 'user', 'request', a user or your "
                "own usage."
            },
        )
    if reach == OWN:
        rows: QuerySet[Any] = UsageRecord.objects.filter(
            owner_id=scope.user_id, team_id__in=scope.team_ids
        )
    elif wants_user:
        rows = UsageRecord.objects.all()
    elif "day" in query.group_by:
        start, end = query.month_from, next_month(query.month_to)
        rows = DailyUsage.objects.filter(day__gte=start, day__lt=end)
        return _narrow(rows, scope=scope, query=query), "day"
    elif "project" in query.group_by or query.project_id is not None:
        rows = MonthlyUsage.objects.all()
    else:  # chargeback's shape: ~teams × flavors rows a month instead of projects × flavors
        rows = TeamMonthlyUsage.objects.all()
    rows = rows.filter(period__gte=query.month_from, period__lte=query.month_to)
    return _narrow(rows, scope=scope, query=query), "period"


def _narrow(rows: QuerySet[Any], *, scope: Scope, query: UsageQuery) -> QuerySet[Any]:
    if report_reach(scope) == TEAMS:
        rows = rows.filter(team_id__in=scope.lead_team_ids)
    if query.project_id is not None and query.team_id is None:
        # The rollups' keys lead with the team: name the project's team so its index applies.
        rows = rows.filter(
            team_id=Subquery(Project.objects.filter(pk=query.project_id).values("team_id")[:1])
        )
    for name, value in (
        ("team_id", query.team_id),
        ("project_id", query.project_id),
        ("pool_id", query.pool_id),
        ("flavor_id", query.flavor_id),
        ("pool__cluster_id", query.cluster_id),
        ("owner_id", query.user_id),
    ):
        if value is not None:
            rows = rows.filter(**{name: value})
    return rows


def _names(model: Any, ids: set[int], attribute: str = "name") -> dict[int, str]:
    return dict(model.objects.filter(pk__in=ids).values_list("pk", attribute)) if ids else {}


def _money(value: Any) -> Decimal:
    return Decimal(value or 0).quantize(SIX_PLACES)


def _keep(value: Decimal) -> Decimal:
    return value


def _named_models() -> dict[str, tuple[Any, str]]:
    return {
        "team_id": (Team, "name"),
        "project_id": (Project, "name"),
        "flavor_id": (Flavor, "name"),
        "pool_id": (NodePool, "name"),
        "pool__cluster_id": (Cluster, "name"),
        "owner_id": (get_user_model(), "username"),
    }


def _fetch(
    grouped: QuerySet[Any], columns: list[str]
) -> tuple[list[dict[str, Any]], dict[str, dict[int, str]]]:
    """The grouped rows and the names of their ids (one query per named key)."""
    named = {c: m for c, m in _named_models().items() if c in columns}
    result = list(grouped)
    return result, {
        column: _names(model, {r[column] for r in result}, attribute)
        for column, (model, attribute) in named.items()
    }


IMPORTED_USAGE = "Usage of allocations unknown here (imported)"


def _per_request(
    result: list[dict[str, Any]], columns: list[str]
) -> tuple[list[dict[str, Any]], dict[int, str]]:
    """Rows grouped by allocation merged into rows per request (its attempts add up), with the
    requests' labels; usage of allocations this portal does not know (imported from another
    cluster) is one row with no request."""
    allocation_ids = {row["allocation_id"] for row in result}
    request_of = dict(
        Allocation.objects.filter(pk__in=allocation_ids).values_list("pk", "request_id")
    )
    merged: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in result:
        row = {**row, "allocation_id": request_of.get(row["allocation_id"])}
        key = tuple(row[column] for column in columns)
        if key in merged:
            for name in SUMMED:
                merged[key][name] += row[name]
        else:
            merged[key] = row
    rows = sorted(
        merged.values(),
        key=lambda row: tuple((row[c] is None, row[c] or 0) for c in columns),
    )
    labels = {
        request.pk: request.label
        for request in GpuRequest.objects.filter(pk__in=set(request_of.values())).only("name")
    }
    return rows, labels


def usage_rows(*, user: Any, query: UsageQuery) -> list[dict[str, Any]]:
    """GPU-equivalent hours and cost grouped by `query.group_by`, ordered by the keys."""
    scope = scope_of(user)
    rows, month_column = _source(scope=scope, query=query)
    if "month" in query.group_by and month_column == "day":
        raise DomainError(
            "invalid",
            "Group a daily series by day, not by month.",
            fields={"group_by": "'month' and 'day' cannot be combined."},
        )
    columns = [
        "period" if key == "month" else "day" if key == "day" else _COLUMN[key]
        for key in query.group_by
    ]
    grouped = (
        rows.values(*columns).annotate(**{name: Sum(name) for name in SUMMED}).order_by(*columns)
    )
    result, names = _fetch(grouped, columns)
    if "request" in query.group_by:
        result, names["allocation_id"] = _per_request(result, columns)
    # PostgreSQL sums of numeric(18, 6) keep exactly 6 places: quantizing them changes nothing
    money = _money if connections[grouped.db].vendor != "postgresql" else _keep
    out = []
    for row in result:
        item: dict[str, Any] = {}
        for key, column in zip(query.group_by, columns, strict=True):
            if key == "month":
                item["month"] = f"{row[column]:%Y-%m}"
            elif key == "day":
                item["day"] = row[column].isoformat()
            elif key == "request" and row[column] is None:
                item["request_id"], item["request"] = None, IMPORTED_USAGE
            else:
                item[f"{key}_id"] = row[column]
                item[key] = names[column].get(row[column], "")
        for name in SUMMED:
            item[name] = money(row[name])
        out.append(item)
    if "day" not in query.group_by:
        storage = storage_cost(scope=scope, query=query)
        _add_storage(out, storage, query=query, money=money)
    for item in out:
        item.setdefault("storage_cost", Decimal(0))
        _split_costs(item)
    return out


#: What the grouped queries add up; `cost` = GPU + CPU + memory (the ledger's metered cost).
SUMMED = ("gpu_hours", "cost", "cpu_cost", "memory_cost")
#: Every amount a report row carries, beside its keys (docs/accounting.md, "What is priced").
AMOUNT_FIELDS = (
    "gpu_hours",
    "gpu_cost",
    "cpu_cost",
    "memory_cost",
    "storage_cost",
    "cost",
    "total_cost",
)


def _split_costs(item: dict[str, Any]) -> None:
    """A row's parts: GPU = metered cost − CPU − memory; total = metered cost + storage."""
    item["gpu_cost"] = item["cost"] - item["cpu_cost"] - item["memory_cost"]
    item["total_cost"] = item["cost"] + item["storage_cost"]


STORAGE_ROW = "Workspace storage"
STORAGE_KEYS = {"team": "team_id", "project": "project_id", "month": "period"}


def _add_storage(
    out: list[dict[str, Any]],
    storage: dict[tuple[int, int, date], Decimal],
    *,
    query: UsageQuery,
    money: Callable[[Decimal], Decimal],
) -> None:
    """Put each team's, project's and month's storage cost on its row (a row of no usage when
    it ran nothing); grouped by anything else (flavor, pool, user, …), storage is not theirs:
    it gets rows of its own, those keys empty and named `STORAGE_ROW`."""
    if not storage:
        return
    keys = [key for key in query.group_by if key in STORAGE_KEYS]
    by_key: dict[tuple[Any, ...], Decimal] = defaultdict(Decimal)
    for (team_id, project_id, month), amount in storage.items():
        parts = {"team": team_id, "project": project_id, "month": f"{month:%Y-%m}"}
        by_key[tuple(parts[key] for key in keys)] += amount
    only_storage_keys = len(keys) == len(query.group_by)

    def key_of(row: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(row["month"] if key == "month" else row[f"{key}_id"] for key in keys)

    index = {key_of(row): row for row in out} if only_storage_keys else {}
    names = {
        "team": _names(Team, {k[keys.index("team")] for k in by_key}) if "team" in keys else {},
        "project": (
            _names(Project, {k[keys.index("project")] for k in by_key}) if "project" in keys else {}
        ),
    }
    for key, amount in sorted(by_key.items(), key=lambda pair: pair[0]):
        amount = money(amount)
        if key in index:
            index[key]["storage_cost"] = amount
            continue
        row: dict[str, Any] = {}
        for name in query.group_by:
            if name in keys:
                value = key[keys.index(name)]
                if name == "month":
                    row["month"] = value
                else:
                    row[f"{name}_id"], row[name] = value, names[name].get(value, "")
            elif name == "day":
                row["day"] = None
            else:
                row[f"{name}_id"], row[name] = None, STORAGE_ROW
        row.update(dict.fromkeys(SUMMED, Decimal(0)), storage_cost=amount)
        out.append(row)
    if only_storage_keys:
        out.sort(key=lambda row: key_of(row))


def storage_cost(*, scope: Scope, query: UsageQuery) -> dict[tuple[int, int, date], Decimal]:
    """The cost of the claimed volumes (project workspaces and members' home volumes) per team,
    project and month of the report, within the caller's reach, each volume from its creation
    to now at the storage price in force (cut at repricings). Empty for a developer's own
    usage and for reports narrowed to a user, pool, flavor or cluster: storage is none of
    theirs. Today's sizes: volume history is not kept (docs/accounting.md)."""
    reach = report_reach(scope)
    if reach == OWN or any(
        value is not None
        for value in (query.user_id, query.pool_id, query.flavor_id, query.cluster_id)
    ):
        return {}
    prices = list(
        ResourcePrice.objects.filter(resource=HostResource.STORAGE).order_by("effective_from")
    )
    if not prices:
        return {}
    workspaces = ProjectWorkspace.objects.select_related("project").prefetch_related("home_volumes")
    if reach == TEAMS:
        workspaces = workspaces.filter(project__team_id__in=scope.lead_team_ids)
    if query.team_id is not None:
        workspaces = workspaces.filter(project__team_id=query.team_id)
    if query.project_id is not None:
        workspaces = workspaces.filter(project_id=query.project_id)
    zone, now = billing_zone(), timezone.now()
    windows = [(month, *month_bounds(month, zone)) for month in query.months]
    out: dict[tuple[int, int, date], Decimal] = defaultdict(Decimal)
    for workspace in workspaces:
        volumes = [(workspace.size_gib, workspace.created_at)] + [
            (home.size_gib, home.created_at) for home in workspace.home_volumes.all()
        ]
        key = (workspace.project.team_id, workspace.project_id)
        for size_gib, since in volumes:
            for month, start, end in windows:
                cost = priced_span(
                    prices, quantity=Decimal(size_gib), start=max(start, since), end=min(end, now)
                )
                if cost:
                    out[(*key, month)] += cost
    return dict(out)


def priced_span(
    prices: list[ResourcePrice], *, quantity: Decimal, start: datetime, end: datetime
) -> Decimal:
    """`quantity` units held over [start, end), cut at the repricings (`prices` in force order),
    priced by the one rule (`cost_of`)."""
    total = Decimal(0)
    if end <= start:
        return total
    cuts = sorted(
        {start, end, *(p.effective_from for p in prices if start < p.effective_from < end)}
    )
    for piece_start, piece_end in itertools.pairwise(cuts):
        price = None
        for candidate in prices:
            if candidate.effective_from <= piece_start:
                price = candidate
        if price is None:
            continue
        hours = seconds_between(piece_start, piece_end) / SECONDS_PER_HOUR
        total += cost_of(rate_per_hour=price.hourly_rate(quantity=quantity), hours=hours)
    return total


def totals(rows: list[dict[str, Any]]) -> dict[str, Decimal]:
    return {name: sum((r[name] for r in rows), Decimal(0)) for name in AMOUNT_FIELDS}


# Idle capacity --------------------------------------------------------------------------------


def pool_rate(*, pool: NodePool, at: datetime) -> Decimal:
    """The price of one GPU-equivalent hour in the pool: its largest flavor's price per unit."""
    for flavor in pool.flavors.order_by("-gpu_equivalent", "pk"):
        price = price_in_force(flavor=flavor, at=at)
        if price is not None:
            return (price.price_per_hour / flavor.gpu_equivalent).quantize(SIX_PLACES)
    return Decimal(0)


def capacity_hours(*, months: list[date], now: datetime) -> dict[int, Decimal]:
    """GPU-hours each pool could have given over the months, up to now, counting each node's
    GPUs only from when its capacity existed: when the portal first knew the node, or earlier
    if work already ran in its pool (history imported or seeded before the node was listed).
    Today's inventory: a node removed since is not counted."""
    zone = billing_zone()
    first_work = dict(
        Allocation.objects.filter(started_at__isnull=False)
        .values("pool_id")
        .annotate(first=Min("started_at"))
        .values_list("pool_id", "first")
    )
    nodes = (
        GpuDevice.objects.values("node_id", "node__pool_id", "node__created_at")
        .annotate(n=Count("pk"))
        .order_by()
    )
    windows = [month_bounds(month, zone) for month in months]
    hours: dict[int, Decimal] = {}
    for node in nodes:
        pool_id, since = node["node__pool_id"], node["node__created_at"]
        if first_work.get(pool_id) is not None:
            since = min(since, first_work[pool_id])
        seconds = Decimal(0)
        for start, end in windows:
            start, end = max(start, since), min(end, now)
            if end > start:
                seconds += seconds_between(start, end)
        hours[pool_id] = hours.get(pool_id, Decimal(0)) + node["n"] * seconds / Decimal(3600)
    return {pool_id: value.quantize(SIX_PLACES) for pool_id, value in hours.items()}


def idle_capacity(*, query: UsageQuery, now: datetime | None = None) -> list[dict[str, Any]]:
    """Per pool (and its cluster): capacity, allocated and idle GPU-hours over the months; idle
    at the pool rate."""
    now = now or timezone.now()
    allocated = dict(
        TeamMonthlyUsage.objects.filter(period__gte=query.month_from, period__lte=query.month_to)
        .values("pool_id")
        .annotate(h=Sum("gpu_hours"))
        .values_list("pool_id", "h")
    )
    capacity = capacity_hours(months=query.months, now=now)
    pools = NodePool.objects.select_related("cluster").order_by("name")
    if query.pool_id is not None:
        pools = pools.filter(pk=query.pool_id)
    if query.cluster_id is not None:
        pools = pools.filter(cluster_id=query.cluster_id)
    out = []
    for pool in pools:
        used = _money(allocated.get(pool.pk))
        total = capacity.get(pool.pk, Decimal(0))
        idle = max(total - used, Decimal(0))
        rate = pool_rate(pool=pool, at=now)
        out.append(
            {
                "pool_id": pool.pk,
                "pool": pool.name,
                "cluster_id": pool.cluster_id,
                "cluster": pool.cluster.name,
                "capacity_gpu_hours": total,
                "allocated_gpu_hours": used,
                "idle_gpu_hours": idle,
                "rate_per_gpu_hour": rate,
                "idle_cost": (idle * rate).quantize(SIX_PLACES),
            }
        )
    return out


@dataclass(frozen=True, slots=True)
class Chargeback:
    rows: list[dict[str, Any]]
    totals: dict[str, Decimal]
    idle: list[dict[str, Any]] | None
    fleet: dict[str, Decimal] | None
    idle_sharing: IdleSharing | None = None


def sharing_rule() -> str:
    return str(getattr(settings, "IDLE_COST_SHARING", USAGE))


def chargeback(
    *, user: Any, query: UsageQuery, now: datetime | None = None, share_idle_back: bool = True
) -> Chargeback:
    """Cost per group for leads, finance and admins; fleet-wide it adds idle capacity so that
    the groups' total plus idle cost is the fleet's cost. Unless `IDLE_COST_SHARING` is off,
    the idle cost is also shared back to the teams (`idle_sharing`), and rows keyed by team
    (not by month or day) carry their `idle_share` and `cost_with_idle`."""
    scope = scope_of(user)
    if report_reach(scope) == OWN:
        raise ForbiddenError("forbidden", "Chargeback is for team leads, finance and admins.")
    rows = usage_rows(user=user, query=query)
    sums = totals(rows)
    fleet_wide = (
        scope.sees_all_tenants
        and query.team_id is None
        and query.project_id is None
        and query.flavor_id is None
        and query.user_id is None
    )
    if not fleet_wide:
        return Chargeback(rows, sums, None, None)
    idle = idle_capacity(query=query, now=now)
    idle_cost = sum((p["idle_cost"] for p in idle), Decimal(0))
    fleet = {
        "allocated_cost": sums["cost"],
        "idle_cost": idle_cost,
        "fleet_cost": sums["cost"] + idle_cost,
    }
    rule = sharing_rule()
    if rule == OFF or not share_idle_back:
        return Chargeback(rows, sums, idle, fleet)
    team_usage = TeamMonthlyUsage.objects.filter(
        period__gte=query.month_from, period__lte=query.month_to
    )
    if query.pool_id is not None:
        team_usage = team_usage.filter(pool_id=query.pool_id)
    if query.cluster_id is not None:
        team_usage = team_usage.filter(pool__cluster_id=query.cluster_id)
    sharing = share_idle(team_usage=team_usage, idle=idle, rule=rule)
    # A team's idle share spans the report's months: it goes on rows keyed by team, not by time.
    if "team" in query.group_by and not {"month", "day"} & set(query.group_by):
        attach_to_rows(rows, sharing=sharing, group_by=query.group_by)
    return Chargeback(rows, sums, idle, fleet, sharing)
