"""The usage ledger: what ran is charged once, split at billing periods, and rollups agree."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.db import transaction
from django.db.models import Sum
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accounting.models import AllocationMeter, DailyUsage, MonthlyUsage, UsageRecord
from accounting.periods import month_bounds, next_month, seconds_between
from accounting.services.metering import meter_usage
from tests.accounting.factories import make_allocation, make_request, set_price
from tests.scheduling.conftest import Fleet
from tests.support.personas import Org

T0 = datetime(2026, 11, 30, 20, 0, tzinfo=UTC)
pytestmark = pytest.mark.django_db


def ledger_seconds() -> Decimal:
    return Decimal(UsageRecord.objects.aggregate(s=Sum("seconds"))["s"] or 0)


def sums(model: Any, field: str = "gpu_hours") -> Decimal:
    return Decimal(str(model.objects.aggregate(s=Sum(field))["s"] or 0))


def test_nothing_ran_nothing_charged(org: Org, fleet: Fleet) -> None:
    request = make_request(project=org.project_a, owner=org.dev_a, flavor=fleet.a100)
    make_allocation(request, started_at=None, ended_at=T0)  # admitted, evicted before it ran
    make_allocation(request, started_at=None)  # admitted, not started yet
    assert meter_usage(now=T0 + timedelta(hours=5)) == 0
    assert not UsageRecord.objects.exists() and not MonthlyUsage.objects.exists()


def test_interval_split_at_month_boundary_in_billing_zone(
    org: Org, fleet: Fleet, settings: Any
) -> None:
    settings.BILLING_TIME_ZONE = "Europe/Berlin"
    set_price(fleet.a100, "2.50")
    request = make_request(project=org.project_a, owner=org.dev_a, flavor=fleet.a100, gpu_count=2)
    # 21:00 → 03:00 Berlin time, 30 Nov → 1 Dec: 3 h in November, 3 h in December
    make_allocation(request, started_at=T0, ended_at=T0 + timedelta(hours=6))
    meter_usage(now=T0 + timedelta(days=1))
    rows = {r.period: r for r in UsageRecord.objects.all()}
    assert set(rows) == {date(2026, 11, 1), date(2026, 12, 1)}
    assert rows[date(2026, 11, 1)].gpu_hours == Decimal("6")  # 2 cards × 3 h
    assert rows[date(2026, 12, 1)].gpu_hours == Decimal("6")
    assert rows[date(2026, 12, 1)].cost == Decimal("15")  # 2 × 3 h × 2.50
    assert sums(MonthlyUsage) == Decimal(12) and sums(DailyUsage) == Decimal(12)


def test_metering_twice_changes_nothing_and_growth_equals_one_pass(org: Org, fleet: Fleet) -> None:
    set_price(fleet.mig_1g, "0.60")
    request = make_request(project=org.project_a, owner=org.dev_a, flavor=fleet.mig_1g)
    allocation = make_allocation(request, started_at=T0)
    for minutes in (1, 2, 2, 90, 60 * 30):  # a running allocation metered as time goes by
        meter_usage(now=T0 + timedelta(minutes=minutes))
    assert ledger_seconds() == 30 * 3600
    allocation.ended_at = T0 + timedelta(hours=40)
    allocation.save()
    meter_usage(now=T0 + timedelta(hours=50))
    meter_usage(now=T0 + timedelta(hours=51))
    assert ledger_seconds() == 40 * 3600
    assert AllocationMeter.objects.get().is_final
    expected = (fleet.mig_1g.gpu_equivalent * 40).quantize(Decimal("0.000001"))
    assert abs(sums(UsageRecord) - expected) < Decimal("0.0001")
    assert sums(UsageRecord, "cost") == Decimal("24.000000")  # 40 h × 0.60


def test_preemption_and_restart_are_separate_intervals(org: Org, fleet: Fleet) -> None:
    request = make_request(project=org.project_a, owner=org.dev_a, flavor=fleet.a100)
    make_allocation(request, started_at=T0, ended_at=T0 + timedelta(hours=1), attempt=1)
    make_allocation(request, started_at=T0 + timedelta(hours=3), attempt=2)  # gap: queued again
    meter_usage(now=T0 + timedelta(hours=5))
    assert ledger_seconds() == 3 * 3600
    assert UsageRecord.objects.values("allocation").distinct().count() == 2


def test_repricing_applies_from_its_start_and_preemptible_multiplier(
    org: Org, fleet: Fleet
) -> None:
    set_price(fleet.a100, "2.00", preemptible_multiplier="0.5")
    set_price(fleet.a100, "3.00", since=T0 + timedelta(hours=1), preemptible_multiplier="0.5")
    request = make_request(project=org.project_a, owner=org.dev_a, flavor=fleet.a100)
    make_allocation(request, started_at=T0, ended_at=T0 + timedelta(hours=2))
    other = make_request(project=org.project_a, owner=org.dev_a, flavor=fleet.a100)
    make_allocation(other, started_at=T0, ended_at=T0 + timedelta(hours=2), is_preemptible=True)
    meter_usage(now=T0 + timedelta(hours=3))
    costs = dict(UsageRecord.objects.values_list("allocation__request_id", "cost"))
    assert costs[request.pk] == Decimal("5")  # 2.00 + 3.00
    assert costs[other.pk] == Decimal("2.5")


def test_priority_multiplier_applies_to_the_priority_it_names(org: Org, fleet: Fleet) -> None:
    price = set_price(fleet.a100, "2.00", preemptible_multiplier="0.5")
    price.priority_multipliers = {"high": "1.5", "critical": 2}
    price.full_clean()
    price.save()
    normal = make_request(project=org.project_a, owner=org.dev_a, flavor=fleet.a100)
    high = make_request(project=org.project_a, owner=org.dev_a, flavor=fleet.a100, priority="high")
    critical = make_request(
        project=org.project_a, owner=org.dev_a, flavor=fleet.a100, priority="critical"
    )
    for request in (normal, high, critical):
        make_allocation(request, started_at=T0, ended_at=T0 + timedelta(hours=2))
    borrowed_high = make_request(
        project=org.project_a, owner=org.dev_a, flavor=fleet.a100, priority="high"
    )
    make_allocation(
        borrowed_high, started_at=T0, ended_at=T0 + timedelta(hours=2), is_preemptible=True
    )
    meter_usage(now=T0 + timedelta(hours=3))
    costs = dict(UsageRecord.objects.values_list("allocation__request_id", "cost"))
    assert costs[normal.pk] == Decimal("4")  # 2 h × 2.00
    assert costs[high.pk] == Decimal("6")  # × 1.5
    assert costs[critical.pk] == Decimal("8")  # × 2
    assert costs[borrowed_high.pk] == Decimal("3")  # × 0.5 × 1.5


@pytest.mark.parametrize(
    "multipliers",
    [{"urgent": "2"}, {"high": "-1"}, {"high": "lots"}, ["high", "2"]],
)
def test_priority_multipliers_refuse_unknown_priorities_and_bad_factors(
    fleet: Fleet, multipliers: Any
) -> None:
    from django.core.exceptions import ValidationError

    price = set_price(fleet.a100, "2.00")
    price.priority_multipliers = multipliers
    with pytest.raises(ValidationError) as error:
        price.full_clean()
    assert "priority_multipliers" in error.value.message_dict


interval = st.tuples(
    st.integers(min_value=0, max_value=200 * 24 * 60),  # start, minutes after the origin
    st.integers(min_value=0, max_value=40 * 24 * 60),  # length in minutes
    st.booleans(),  # still running?
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    intervals=st.lists(interval, min_size=1, max_size=6),
    meter_times=st.lists(st.integers(min_value=0, max_value=260 * 24 * 60), max_size=4),
    zone=st.sampled_from(["UTC", "Europe/Berlin", "America/New_York"]),
)
def test_property_per_period_totals_equal_the_intervals(
    org: Org,
    fleet: Fleet,
    settings: Any,
    intervals: list[tuple[int, int, bool]],
    meter_times: list[int],
    zone: str,
) -> None:
    """Random histories metered at random moments: each month holds exactly its share."""
    settings.BILLING_TIME_ZONE = zone
    tz = ZoneInfo(zone)
    origin = datetime(2026, 1, 20, 13, 7, tzinfo=UTC)  # spans both DST changes
    now = origin + timedelta(days=260)
    with transaction.atomic():
        request = make_request(project=org.project_a, owner=org.dev_a, flavor=fleet.l4_6g)
        expected: dict[date, Decimal] = defaultdict(Decimal)
        for attempt, (start_min, length_min, running) in enumerate(intervals, start=1):
            start = origin + timedelta(minutes=start_min, seconds=attempt)
            end = None if running else start + timedelta(minutes=length_min)
            make_allocation(request, started_at=start, ended_at=end, attempt=attempt)
            stop = min(end or now, now)
            month = date(2026, 1, 1)
            while month < date(2027, 1, 1):
                first, after = month_bounds(month, tz)
                if min(stop, after) > max(start, first):
                    expected[month] += seconds_between(max(start, first), min(stop, after))
                month = next_month(month)
        for minutes in sorted(meter_times):
            meter_usage(now=origin + timedelta(minutes=minutes))
        meter_usage(now=now)
        meter_usage(now=now)
        got = {
            row["period"]: Decimal(str(row["s"]))
            for row in UsageRecord.objects.values("period").annotate(s=Sum("seconds"))
        }
        assert got == {m: s for m, s in expected.items() if s}
        unit = fleet.l4_6g.gpu_equivalent
        total_hours = sum(expected.values(), Decimal(0)) / 3600 * unit
        tolerance = Decimal("0.00001") * (1 + DailyUsage.objects.count())
        assert abs(sums(UsageRecord) - total_hours) < tolerance
        assert abs(sums(MonthlyUsage) - sums(UsageRecord)) < tolerance
        assert abs(sums(DailyUsage) - sums(UsageRecord)) < tolerance
        transaction.set_rollback(True)


def test_a_project_with_billed_usage_cannot_be_deleted(org: Org, fleet: Fleet) -> None:
    from django.db.models import ProtectedError

    request = make_request(project=org.project_a, owner=org.dev_a, flavor=fleet.a100)
    make_allocation(request, started_at=T0, ended_at=T0 + timedelta(hours=1))
    meter_usage(now=T0 + timedelta(hours=2))
    assert UsageRecord.objects.filter(project=org.project_a).exists()
    request.delete()  # billing history outlives the request
    with pytest.raises(ProtectedError):
        org.project_a.delete()
    assert UsageRecord.objects.filter(project_id=org.project_a.pk).count() == 1
