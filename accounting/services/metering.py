"""Metering: turning what allocations ran into ledger rows and rollups.

The meter keeps a cursor per allocation (`AllocationMeter.metered_until`) and only ever adds the
interval between the cursor and min(ended_at, now). Each run, per allocation and in one
transaction:

1. lock the allocation's meter row (create it at `started_at` the first time);
2. cut [cursor, end) at billing days, months and repricings;
3. add each piece's GPU-equivalent hours and cost to the ledger row of its month and to the
   monthly, team-monthly and daily rollups;
4. move the cursor to `end` (final once the allocation has ended).

A second run over the same `now` finds nothing between cursor and end and changes nothing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

from django.db import IntegrityError, models, transaction
from django.db.models import F
from django.utils import timezone

from accounting.models import (
    AllocationMeter,
    DailyUsage,
    MonthlyUsage,
    Price,
    TeamMonthlyUsage,
    UsageRecord,
)
from accounting.periods import Piece, billing_zone, seconds_between, split_by_day
from scheduling.models import Allocation

SIX_PLACES = Decimal("0.000001")
SECONDS_PER_HOUR = Decimal(3600)


def _price_at(prices: list[Price], moment: datetime) -> Price | None:
    current = None
    for price in prices:  # ordered by effective_from
        if price.effective_from <= moment:
            current = price
        else:
            break
    return current


def priced_pieces(
    allocation: Allocation, prices: list[Price], start: datetime, end: datetime, zone: ZoneInfo
) -> Iterator[tuple[Piece, Decimal, Decimal, Decimal]]:
    """The allocation's use over [start, end) cut at days, months and repricings (`prices` in
    force order): each piece with its seconds, GPU-hours and cost."""
    request = allocation.request
    for piece in split_by_day(start, end, zone, extra_cuts=[p.effective_from for p in prices]):
        seconds = seconds_between(piece.start, piece.end)
        hours = seconds / SECONDS_PER_HOUR
        price = _price_at(prices, piece.start)
        cost = Decimal(0)
        if price is not None:
            rate = price.hourly_rate(
                gpu_count=request.gpu_count,
                priority=request.priority,
                preemptible=allocation.is_preemptible,
            )
            cost = (rate * hours).quantize(SIX_PLACES)
        yield piece, seconds, (request.gpu_equivalent * hours).quantize(SIX_PLACES), cost


def _add(model: type[models.Model], key: dict[str, Any], amounts: dict[str, Any]) -> None:
    """Add amounts to the row with this key, creating it the first time (race-safe)."""
    increments = {name: F(name) + value for name, value in amounts.items()}
    if model._default_manager.filter(**key).update(**increments):
        return
    try:
        with transaction.atomic():
            model._default_manager.create(**key, **amounts)
    except IntegrityError:  # another meter created it in between
        model._default_manager.filter(**key).update(**increments)


def meter_allocation(*, allocation_id: int, now: datetime) -> bool:
    """Meter one allocation up to `now`; True if usage grew."""
    zone = billing_zone()
    with transaction.atomic():
        allocation = Allocation.objects.select_related("request").get(pk=allocation_id)
        if allocation.started_at is None:
            return False  # nothing ran: nothing to charge
        meter, _ = AllocationMeter.objects.select_for_update().get_or_create(
            allocation_id=allocation_id, defaults={"metered_until": allocation.started_at}
        )
        if meter.is_final:
            return False
        request = allocation.request
        # 1. the part not metered yet
        start = max(meter.metered_until, allocation.started_at)
        end = min(allocation.ended_at or now, now)
        is_final = allocation.ended_at is not None and allocation.ended_at <= now
        if end <= start:
            if is_final:
                AllocationMeter.objects.filter(pk=meter.pk).update(is_final=True)
            return False
        # 2. cut at days, months and repricings
        prices = list(Price.objects.filter(flavor_id=request.flavor_id).order_by("effective_from"))
        months: dict[Any, dict[str, Any]] = defaultdict(
            lambda: {"seconds": Decimal(0), "gpu_hours": Decimal(0), "cost": Decimal(0)}
        )
        days: dict[Any, dict[str, Decimal]] = defaultdict(
            lambda: {"gpu_hours": Decimal(0), "cost": Decimal(0)}
        )
        for piece, seconds, gpu_hours, cost in priced_pieces(allocation, prices, start, end, zone):
            month = months[piece.month]
            month["seconds"] += seconds
            month["gpu_hours"] += gpu_hours
            month["cost"] += cost
            month.setdefault("started_at", piece.start)
            month["ended_at"] = piece.end
            days[piece.day]["gpu_hours"] += gpu_hours
            days[piece.day]["cost"] += cost
        # 3. ledger rows and rollups
        key = {
            "team_id": request.team_id,
            "project_id": request.project_id,
            "flavor_id": request.flavor_id,
            "pool_id": allocation.pool_id,
        }
        for period, sums in months.items():
            updated = UsageRecord.objects.filter(allocation_id=allocation_id, period=period).update(
                seconds=F("seconds") + sums["seconds"],
                gpu_hours=F("gpu_hours") + sums["gpu_hours"],
                cost=F("cost") + sums["cost"],
                ended_at=sums["ended_at"],
            )
            if not updated:
                UsageRecord.objects.create(
                    allocation_id=allocation_id,
                    period=period,
                    owner_id=request.owner_id,
                    gpu_count=request.gpu_count,
                    is_preemptible=allocation.is_preemptible,
                    **key,
                    **sums,
                )
            amounts = {"gpu_hours": sums["gpu_hours"], "cost": sums["cost"]}
            _add(MonthlyUsage, {"period": period, **key}, amounts)
            team_key = {k: v for k, v in key.items() if k != "project_id"}
            _add(TeamMonthlyUsage, {"period": period, **team_key}, amounts)
        for day, sums in days.items():
            _add(DailyUsage, {"day": day, **key}, sums)
        # 4. move the cursor
        AllocationMeter.objects.filter(pk=meter.pk).update(metered_until=end, is_final=is_final)
    return True


def meter_usage(*, now: datetime | None = None) -> int:
    """Meter every allocation that ran and is not fully metered yet; how many grew."""
    now = now or timezone.now()
    candidates = (
        Allocation.objects.filter(started_at__isnull=False, started_at__lt=now)
        .exclude(meter__is_final=True)
        .values_list("pk", flat=True)
    )
    return sum(meter_allocation(allocation_id=pk, now=now) for pk in list(candidates))
