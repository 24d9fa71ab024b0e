"""Billing periods: months and days in the billing time zone, and cutting intervals at them.

Pure functions over aware datetimes. Boundaries are local midnights converted to UTC through
zoneinfo, so a day of 23 or 25 hours (DST) is cut where the wall clock says.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

from django.conf import settings

MICROSECONDS = Decimal(1_000_000)


def billing_zone() -> ZoneInfo:
    return ZoneInfo(settings.BILLING_TIME_ZONE)


def local_midnight(day: date, zone: ZoneInfo) -> datetime:
    """The instant (UTC) at which `day` begins on the billing wall clock."""
    return datetime.combine(day, time(0), tzinfo=zone).astimezone(UTC)


def month_of(moment: datetime, zone: ZoneInfo) -> date:
    """The billing month (its first day) a moment falls in."""
    return moment.astimezone(zone).date().replace(day=1)


def day_of(moment: datetime, zone: ZoneInfo) -> date:
    return moment.astimezone(zone).date()


def next_month(month: date) -> date:
    return date(month.year + month.month // 12, month.month % 12 + 1, 1)


def month_bounds(month: date, zone: ZoneInfo) -> tuple[datetime, datetime]:
    """[start, end) of a billing month as UTC instants."""
    return local_midnight(month, zone), local_midnight(next_month(month), zone)


def seconds_between(start: datetime, end: datetime) -> Decimal:
    """Exact seconds (microsecond resolution) from start to end."""
    delta = end - start
    whole = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return Decimal(whole) / MICROSECONDS


@dataclass(frozen=True, slots=True)
class Piece:
    """A part of an interval that lies inside one billing day (and so one month)."""

    start: datetime
    end: datetime
    day: date
    month: date


def split_by_day(
    start: datetime, end: datetime, zone: ZoneInfo, *, extra_cuts: Iterable[datetime] = ()
) -> Iterator[Piece]:
    """Cut [start, end) at every billing-day boundary (and at `extra_cuts`, e.g. repricings).

    The pieces cover the interval exactly, without gaps or overlaps.
    """
    if end <= start:
        return
    cuts = {cut for cut in extra_cuts if start < cut < end}
    day = day_of(start, zone)
    while True:
        day = day + timedelta(days=1)
        boundary = local_midnight(day, zone)
        if boundary >= end:
            break
        if boundary > start:
            cuts.add(boundary)
    edges = [start, *sorted(cuts), end]
    for piece_start, piece_end in zip(edges, edges[1:], strict=False):
        local_day = day_of(piece_start, zone)
        yield Piece(piece_start, piece_end, local_day, local_day.replace(day=1))
