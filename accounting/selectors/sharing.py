"""Reads behind the sharing report: pools, cards, runs with their samples, and queue waits."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from django.db.models import Avg, Max, Min, Q
from django.utils import timezone

from accounting.periods import billing_zone, local_midnight
from accounting.sharing_report import (
    Card,
    Claim,
    Pool,
    PoolSharing,
    Run,
    Shape,
    Waiting,
    sharing_report,
)
from scheduling.choices import FlavorKind, RequestStatus
from scheduling.models import Allocation, GpuDevice, GpuRequest, NodePool
from scheduling.selectors.pilots import pilot_in_force
from tenants.errors import ForbiddenError
from tenants.models import scope_of

DEFAULT_DAYS = 30
MAX_DAYS = 366
# Runs that ended up to this long before the period may have shared a card with its runs.
NEIGHBOUR_LOOKBACK = timedelta(days=7)


@dataclass(frozen=True, slots=True)
class SharingPeriod:
    """Days [first, last] in the billing time zone, and the instants they span (up to now)."""

    first: date
    last: date
    start: datetime
    end: datetime


def require_sharing_reader(user: Any) -> None:
    """The sharing report is fleet-wide: finance and platform admins, like idle capacity."""
    if not scope_of(user).sees_all_tenants:
        raise ForbiddenError("forbidden", "The sharing report is for finance and platform admins.")


def sharing_period(
    *, first: date | None = None, last: date | None = None, now: datetime | None = None
) -> SharingPeriod:
    """The period asked for; by default the last 30 days, today included."""
    now = now or timezone.now()
    zone = billing_zone()
    last = last or now.astimezone(zone).date()
    first = first or last - timedelta(days=DEFAULT_DAYS - 1)
    start = local_midnight(first, zone)
    end = min(local_midnight(last + timedelta(days=1), zone), now)
    return SharingPeriod(first=first, last=last, start=start, end=max(end, start))


def _shape(claim: dict[str, Any]) -> Shape:
    return Shape(
        whole=bool(claim.get("whole")),
        memory_mib=int(claim.get("memory_mib") or 0),
        cores_percent=int(claim.get("cores_percent") or 0),
        mig_profile=str(claim.get("mig_profile") or ""),
    )


def _flavor_shape(kind: str, memory_mib: int, cores_percent: int, mig_profile: str) -> Shape:
    if kind == FlavorKind.WHOLE:
        return Shape(whole=True)
    if kind == FlavorKind.MIG:
        return Shape(mig_profile=mig_profile)
    return Shape(memory_mib=memory_mib, cores_percent=cores_percent)


def _pools(pools: list[NodePool], today: date) -> list[Pool]:
    """The pools with their cards (from when each existed) and the shapes of their flavors."""
    first_work = dict(
        Allocation.objects.filter(pool__in=pools, started_at__isnull=False)
        .values("pool_id")
        .annotate(first=Min("started_at"))
        .values_list("pool_id", "first")
    )
    cards: dict[int, list[Card]] = {pool.pk: [] for pool in pools}
    for device in GpuDevice.objects.filter(node__pool__in=pools).values(
        "node__pool_id", "node__name", "node__created_at", "index", "memory_mib", "mig_layout"
    ):
        pool_id = device["node__pool_id"]
        since = device["node__created_at"]
        if first_work.get(pool_id) is not None:
            since = min(since, first_work[pool_id])
        layout = device["mig_layout"] if isinstance(device["mig_layout"], dict) else {}
        cards[pool_id].append(
            Card(
                node=device["node__name"],
                index=device["index"],
                memory_mib=device["memory_mib"],
                available_from=since,
                mig_layout={str(k): int(v) for k, v in layout.items()},
            )
        )
    out = []
    for pool in pools:
        shapes = tuple(
            _flavor_shape(f.kind, f.gpu_memory_mib, f.gpu_cores_percent, f.mig_profile)
            for f in pool.flavors.all()
            if f.is_active
        )
        out.append(
            Pool(
                pool_id=pool.pk,
                name=pool.name,
                slug=pool.slug,
                sharing_mode=pool.sharing_mode,
                cards=tuple(sorted(cards[pool.pk], key=lambda c: (c.node, c.index))),
                flavor_shapes=shapes,
                is_pilot=pilot_in_force(pool, today=today),
                pilot_until=pool.pilot_until if pool.is_pilot else None,
                pilot_teams=tuple(sorted(t.name for t in pool.pilot_teams.all()))
                if pool.is_pilot
                else (),
            )
        )
    return out


def _runs(pools: list[NodePool], period: SharingPeriod) -> list[Run]:
    """Every attempt that overlaps the period or the neighbour look-back before it, with the
    mean activity and peak memory of its samples inside the period."""
    in_period = Q(samples__sampled_at__gte=period.start, samples__sampled_at__lt=period.end)
    rows = (
        Allocation.objects.filter(
            pool__in=pools, started_at__isnull=False, started_at__lt=period.end
        )
        .exclude(ended_at__lt=period.start - NEIGHBOUR_LOOKBACK)
        .annotate(
            mean_activity=Avg("samples__activity_percent", filter=in_period),
            peak_memory=Max("samples__memory_used_mib", filter=in_period),
        )
        .values(
            "pk",
            "pool_id",
            "claims",
            "started_at",
            "ended_at",
            "end_reason",
            "mean_activity",
            "peak_memory",
            "request__flavor_id",
            "request__flavor__kind",
            "request__flavor__gpu_memory_mib",
            "request__gpu_memory_mib",
            "request__gpu_count",
            "request__gpu_equivalent",
            "request__image",
            "request__command",
            "request__kind",
        )
        .order_by("started_at", "pk")
    )
    runs = []
    for row in rows:
        claims = row["claims"] if isinstance(row["claims"], list) else []
        per_gpu = row["request__gpu_memory_mib"] or row["request__flavor__gpu_memory_mib"]
        command = row["request__command"] if isinstance(row["request__command"], list) else []
        runs.append(
            Run(
                run_id=row["pk"],
                pool_id=row["pool_id"],
                flavor_id=row["request__flavor_id"],
                gpu_count=row["request__gpu_count"],
                gpu_equivalent=float(row["request__gpu_equivalent"]),
                started_at=row["started_at"],
                ended_at=row["ended_at"],
                claims=tuple(
                    Claim(str(c.get("node", "")), int(c.get("device_index", 0)), _shape(c))
                    for c in claims
                    if isinstance(c, dict)
                ),
                image=row["request__image"],
                command=tuple(str(part) for part in command),
                kind=row["request__kind"],
                succeeded=row["end_reason"] == RequestStatus.SUCCEEDED,
                memory_held_mib=per_gpu * row["request__gpu_count"],
                mean_activity_percent=row["mean_activity"],
                peak_memory_mib=row["peak_memory"],
            )
        )
    return runs


def _waiting(pools: list[NodePool], period: SharingPeriod) -> list[Waiting]:
    """Requests of the pools' flavors that waited in the queue during the period: from when they
    were queued to their first admission (or their end, or the period's end)."""
    rows = (
        GpuRequest.objects.filter(
            flavor__pool__in=pools, queued_at__isnull=False, queued_at__lt=period.end
        )
        .annotate(admitted=Min("allocations__admitted_at"))
        .filter(
            Q(admitted__gte=period.start)
            | Q(admitted__isnull=True, finished_at__isnull=True)
            | Q(admitted__isnull=True, finished_at__gte=period.start)
        )
        .values(
            "flavor__pool_id",
            "queued_at",
            "admitted",
            "finished_at",
            "flavor__kind",
            "flavor__gpu_memory_mib",
            "flavor__gpu_cores_percent",
            "flavor__mig_profile",
            "gpu_memory_mib",
            "gpu_cores_percent",
        )
    )
    out = []
    for row in rows:
        until = row["admitted"] or row["finished_at"] or period.end
        shape = _flavor_shape(
            row["flavor__kind"],
            row["gpu_memory_mib"] or row["flavor__gpu_memory_mib"],
            row["gpu_cores_percent"] or row["flavor__gpu_cores_percent"],
            row["flavor__mig_profile"],
        )
        if until > row["queued_at"]:
            out.append(Waiting(row["flavor__pool_id"], row["queued_at"], until, shape))
    return out


def pool_sharing(
    *, period: SharingPeriod, pool_id: int | None = None, pilots_only: bool = False
) -> list[PoolSharing]:
    """The sharing report of every pool (or one, or the pilots) over the period."""
    pools_query = NodePool.objects.prefetch_related("flavors", "pilot_teams").order_by("name")
    if pool_id is not None:
        pools_query = pools_query.filter(pk=pool_id)
    if pilots_only:
        pools_query = pools_query.filter(is_pilot=True)
    pools = list(pools_query)
    if not pools:
        return []
    today = timezone.localdate()
    report = sharing_report(
        pools=_pools(pools, today),
        runs=_runs(pools, period),
        waiting=_waiting(pools, period),
        start=period.start,
        end=period.end,
    )
    return report
