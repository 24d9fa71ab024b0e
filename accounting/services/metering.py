"""Metering: turning what allocations ran into ledger rows and rollups.

The meter keeps a cursor per allocation (`AllocationMeter.metered_until`) and only ever adds the
interval between the cursor and min(ended_at, now). Each run, per allocation and in one
transaction:

1. lock the allocation's meter row (create it at `started_at` the first time);
2. cut [cursor, end) at billing days, months and repricings (flavor, CPU and memory prices);
3. add each piece's GPU-equivalent hours and cost (GPU + CPU + memory, the last two also kept
   apart) to the ledger row of its month and to the
   monthly, team-monthly and daily rollups;
4. move the cursor to `end` (final once the allocation has ended).

A second run over the same `now` finds nothing between cursor and end and changes nothing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, TypeVar
from zoneinfo import ZoneInfo

from django.db import IntegrityError, models, transaction
from django.db.models import F
from django.utils import timezone

from accounting.choices import HostResource
from accounting.models import (
    SIX_PLACES,
    AllocationMeter,
    DailyUsage,
    MonthlyUsage,
    Price,
    ResourcePrice,
    TeamMonthlyUsage,
    UsageRecord,
    cost_of,
    hourly_rates,
)
from accounting.periods import Piece, billing_zone, seconds_between, split_by_day
from scheduling.models import Allocation

SECONDS_PER_HOUR = Decimal(3600)
_P = TypeVar("_P", Price, ResourcePrice)
#: What the ledger and every rollup add up (`cost` is the sum of GPU, CPU and memory).
AMOUNTS = ("gpu_hours", "cost", "cpu_cost", "memory_cost")


def _price_at(prices: list[_P], moment: datetime) -> _P | None:
    current = None
    for price in prices:  # ordered by effective_from
        if price.effective_from <= moment:
            current = price
        else:
            break
    return current


def host_prices() -> dict[str, list[ResourcePrice]]:
    """The CPU and memory price lists in force order (storage is priced per team, not here)."""
    lists: dict[str, list[ResourcePrice]] = {HostResource.CPU: [], HostResource.MEMORY: []}
    for price in ResourcePrice.objects.filter(resource__in=list(lists)).order_by("effective_from"):
        lists[price.resource].append(price)
    return lists


@dataclass(frozen=True, slots=True)
class PricedPiece:
    """One piece of an allocation's use: `cost` is GPU + CPU + memory, the last two also apart."""

    piece: Piece
    seconds: Decimal
    gpu_hours: Decimal
    cost: Decimal
    cpu_cost: Decimal
    memory_cost: Decimal


def priced_pieces(
    allocation: Allocation,
    prices: list[Price],
    start: datetime,
    end: datetime,
    zone: ZoneInfo,
    *,
    host: dict[str, list[ResourcePrice]] | None = None,
) -> Iterator[PricedPiece]:
    """The allocation's use over [start, end) cut at days, months and repricings (`prices` of
    its flavor and `host` CPU/memory prices, each in force order), each piece priced."""
    request = allocation.request
    host = host or {}
    cpu_prices = host.get(HostResource.CPU, [])
    memory_prices = host.get(HostResource.MEMORY, [])
    cuts = [p.effective_from for p in prices]
    cuts += [p.effective_from for p in [*cpu_prices, *memory_prices]]
    for piece in split_by_day(start, end, zone, extra_cuts=sorted(cuts)):
        seconds = seconds_between(piece.start, piece.end)
        hours = seconds / SECONDS_PER_HOUR
        rates = hourly_rates(
            request=request,
            preemptible=allocation.is_preemptible,
            price=_price_at(prices, piece.start),
            cpu_price=_price_at(cpu_prices, piece.start),
            memory_price=_price_at(memory_prices, piece.start),
        )
        gpu_cost = cost_of(rate_per_hour=rates.gpu, hours=hours)
        cpu_cost = cost_of(rate_per_hour=rates.cpu, hours=hours)
        memory_cost = cost_of(rate_per_hour=rates.memory, hours=hours)
        yield PricedPiece(
            piece=piece,
            seconds=seconds,
            gpu_hours=(request.gpu_equivalent * hours).quantize(SIX_PLACES),
            cost=gpu_cost + cpu_cost + memory_cost,
            cpu_cost=cpu_cost,
            memory_cost=memory_cost,
        )


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
            lambda: {"seconds": Decimal(0), **dict.fromkeys(AMOUNTS, Decimal(0))}
        )
        days: dict[Any, dict[str, Decimal]] = defaultdict(
            lambda: dict.fromkeys(AMOUNTS, Decimal(0))
        )
        pieces = priced_pieces(allocation, prices, start, end, zone, host=host_prices())
        for priced in pieces:
            piece = priced.piece
            month = months[piece.month]
            month["seconds"] += priced.seconds
            for name in AMOUNTS:
                month[name] += getattr(priced, name)
                days[piece.day][name] += getattr(priced, name)
            month.setdefault("started_at", piece.start)
            month["ended_at"] = piece.end
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
                **{name: F(name) + sums[name] for name in AMOUNTS},
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
            amounts = {name: sums[name] for name in AMOUNTS}
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
