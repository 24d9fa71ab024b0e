"""Cutting intervals at billing days and months: nothing lost, nothing counted twice."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from hypothesis import given, settings
from hypothesis import strategies as st

from accounting.periods import month_bounds, seconds_between, split_by_day

ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"]
instants = st.datetimes(min_value=datetime(2025, 1, 1), max_value=datetime(2027, 12, 31)).map(
    lambda moment: moment.replace(tzinfo=UTC)
)


@settings(max_examples=300, deadline=None)
@given(
    start=instants,
    length=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=80)),
    zone=st.sampled_from(ZONES),
)
def test_pieces_cover_the_interval_exactly_and_stay_inside_one_day(
    start: datetime, length: timedelta, zone: str
) -> None:
    tz = ZoneInfo(zone)
    end = start + length
    pieces = list(split_by_day(start, end, tz))
    assert sum(seconds_between(p.start, p.end) for p in pieces) == seconds_between(start, end)
    for piece, following in zip(pieces, pieces[1:], strict=False):
        assert piece.end == following.start
    for piece in pieces:
        assert piece.start < piece.end
        assert piece.start.astimezone(tz).date() == piece.day
        assert (piece.end - timedelta(microseconds=1)).astimezone(tz).date() == piece.day
        first, after = month_bounds(piece.month, tz)
        assert first <= piece.start and piece.end <= after


def test_dst_days_have_23_and_25_hours_in_berlin() -> None:
    tz = ZoneInfo("Europe/Berlin")
    spring = list(split_by_day(*month_bounds(date(2026, 3, 1), tz), tz))
    autumn = list(split_by_day(*month_bounds(date(2026, 10, 1), tz), tz))
    hours = {p.day: seconds_between(p.start, p.end) / 3600 for p in spring + autumn}
    assert hours[date(2026, 3, 29)] == 23
    assert hours[date(2026, 10, 25)] == 25
    assert len(spring) == 31 and len(autumn) == 31


def test_month_boundary_is_local_midnight() -> None:
    tz = ZoneInfo("Europe/Berlin")
    start = datetime(2026, 11, 30, 22, 0, tzinfo=UTC)  # 23:00 in Berlin
    pieces = list(split_by_day(start, start + timedelta(hours=2), tz))
    assert [p.month for p in pieces] == [date(2026, 11, 1), date(2026, 12, 1)]
    assert pieces[0].end == datetime(2026, 11, 30, 23, 0, tzinfo=UTC)


def test_extra_cuts_split_a_day() -> None:
    start = datetime(2026, 5, 1, tzinfo=UTC)
    cut = start + timedelta(hours=5)
    pieces = list(
        split_by_day(start, start + timedelta(hours=10), ZoneInfo("UTC"), extra_cuts=[cut])
    )
    assert [p.end for p in pieces] == [cut, start + timedelta(hours=10)]
