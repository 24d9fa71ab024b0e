"""Efficiency: allocated vs actively used GPU-hours, per request, project and team (selectors).

Allocated GPU-hours of an allocation = its GPU-equivalents × the hours it ran. Active GPU-hours =
allocated × its mean GPU activity from the stored utilisation samples. Waste = allocated −
active. Samples are kept for SAMPLE_RETENTION_SECONDS (14 days by default), so these figures
cover recent work; an allocation with no samples counts as allocated with unknown activity and is
left out of the active and waste sums (reported as `unmeasured_gpu_hours`).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import Avg, Count, Max, QuerySet
from django.utils import timezone

from accounting.models import Price
from accounting.rightsizing import FlavorOption, RunProfile, Suggestion, suggest_smaller_flavor
from accounting.selectors.usage import ALL, OWN, report_reach
from scheduling.choices import FINISHED_STATUSES
from scheduling.models import Allocation, Flavor, GpuRequest
from tenants.models import scope_of

TWO = Decimal("0.01")
EFFICIENCY_KEYS = ("request", "project", "team")


def _hours(allocation: Allocation, now: datetime) -> Decimal:
    if allocation.started_at is None:
        return Decimal(0)
    end = allocation.ended_at or now
    return Decimal(max((end - allocation.started_at).total_seconds(), 0)) / Decimal(3600)


def _measured(allocations: QuerySet[Allocation]) -> QuerySet[Allocation]:
    return allocations.annotate(
        mean_activity=Avg("samples__activity_percent"),
        peak_activity=Max("samples__activity_percent"),
        peak_memory_mib=Max("samples__memory_used_mib"),
        sample_count=Count("samples"),
    )


def _figures(allocated: Decimal, active: Decimal, unmeasured: Decimal) -> dict[str, Any]:
    measured = allocated - unmeasured
    return {
        "allocated_gpu_hours": allocated.quantize(TWO),
        "active_gpu_hours": active.quantize(TWO),
        "waste_gpu_hours": (measured - active).quantize(TWO),
        "unmeasured_gpu_hours": unmeasured.quantize(TWO),
        "efficiency_percent": (active * 100 / measured).quantize(Decimal("0.1"))
        if measured > 0
        else None,
    }


def efficiency_rows(
    *, user: Any, group_by: str = "project", days: int = 14, now: datetime | None = None
) -> list[dict[str, Any]]:
    """Efficiency of the work that ran in the last `days` days within the caller's reach."""
    now = now or timezone.now()
    scope = scope_of(user)
    reach = report_reach(scope)
    allocations = Allocation.objects.filter(started_at__isnull=False).exclude(
        ended_at__lt=now - timedelta(days=days)
    )
    if reach == OWN:
        allocations = allocations.filter(
            request__owner_id=scope.user_id, request__team_id__in=scope.team_ids
        )
    elif reach != ALL:
        allocations = allocations.filter(request__team_id__in=scope.lead_team_ids)
    rows = _measured(
        allocations.select_related("request__project", "request__team", "request__flavor")
    ).order_by("request_id", "attempt")
    sums: dict[Any, list[Decimal]] = defaultdict(lambda: [Decimal(0)] * 3)
    labels: dict[Any, dict[str, Any]] = {}
    for allocation in rows:
        request = allocation.request
        if group_by == "request":
            key = request.pk
            label = {
                "request_id": request.pk,
                "request": request.label,
                "project_id": request.project_id,
                "project": request.project.name,
            }
        elif group_by == "project":
            key = request.project_id
            label = {"project_id": request.project_id, "project": request.project.name}
        else:
            key, label = request.team_id, {"team_id": request.team_id, "team": request.team.name}
        labels[key] = label
        allocated = request.gpu_equivalent * _hours(allocation, now)
        mean = allocation.mean_activity  # type: ignore[attr-defined]
        total = sums[key]
        total[0] += allocated
        if mean is None:
            total[2] += allocated
        else:
            total[1] += allocated * Decimal(str(mean)) / 100
    return [{**labels[key], **_figures(*sums[key])} for key in sorted(sums)]


def flavor_options() -> list[FlavorOption]:
    """Every active flavor with its tier and the price per hour in force now (None: unpriced)."""
    prices = _prices_now()
    return [
        FlavorOption(
            f.name,
            f.gpu_memory_mib,
            f.gpu_cores_percent,
            f.gpu_equivalent,
            tier=f.pool.tier.name,
            price_per_hour=prices.get(f.pk),
        )
        for f in Flavor.objects.filter(is_active=True).select_related("pool__tier")
    ]


def _prices_now() -> dict[int, Decimal]:
    """The price per hour in force now for each priced flavor, in one query."""
    prices: dict[int, Decimal] = {}
    for flavor_id, price in (
        Price.objects.filter(effective_from__lte=timezone.now())
        .order_by("flavor_id", "effective_from")
        .values_list("flavor_id", "price_per_hour")
    ):
        prices[flavor_id] = price  # the latest in force wins
    return prices


def request_efficiency(
    request: GpuRequest,
    *,
    now: datetime | None = None,
    options: list[FlavorOption] | None = None,
) -> dict[str, Any]:
    """The request's efficiency over all its attempts and, once finished, a right-sizing hint."""
    now = now or timezone.now()
    allocated = active = unmeasured = Decimal(0)
    peak_memory: int | None = None
    peak_activity = 0.0
    samples = 0
    for allocation in _measured(request.allocations.filter(started_at__isnull=False)):
        hours = request.gpu_equivalent * _hours(allocation, now)
        allocated += hours
        mean = allocation.mean_activity  # type: ignore[attr-defined]
        if mean is None:
            unmeasured += hours
            continue
        active += hours * Decimal(str(mean)) / 100
        samples += allocation.sample_count  # type: ignore[attr-defined]
        peak_activity = max(peak_activity, allocation.peak_activity)  # type: ignore[attr-defined]
        memory = allocation.peak_memory_mib  # type: ignore[attr-defined]
        if memory is not None:
            peak_memory = max(peak_memory or 0, memory)
    suggestion: Suggestion | None = None
    if request.status in FINISHED_STATUSES:
        flavor = request.flavor
        options = options or flavor_options()
        run = RunProfile(
            tier=flavor.pool.tier.name,
            held_price_per_hour=_prices_now().get(flavor.pk),
            flavor_name=flavor.name,
            gpu_count=request.gpu_count,
            held_cores_percent=request.gpu_cores_percent or flavor.gpu_cores_percent,
            held_gpu_equivalent=request.gpu_equivalent / request.gpu_count,
            peak_memory_mib=peak_memory,
            peak_activity_percent=peak_activity,
            sample_count=samples,
        )
        suggestion = suggest_smaller_flavor(run, options)
    return {
        "request_id": request.pk,
        **_figures(allocated, active, unmeasured),
        "peak_memory_mib": peak_memory,
        "peak_activity_percent": round(peak_activity, 1),
        "sample_count": samples,
        "right_sizing": None
        if suggestion is None
        else {
            "flavor": suggestion.flavor_name,
            "gpu_equivalent": suggestion.gpu_equivalent,
            "saving_percent": suggestion.saving_percent,
            "reason": suggestion.reason,
        },
    }
