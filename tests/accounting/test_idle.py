"""Idle capacity: team totals plus idle cost equal the fleet's cost."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accounting.selectors.usage import UsageQuery, chargeback, pool_rate
from accounting.services.metering import meter_usage
from scheduling.models import GpuDevice, Node, NodePool
from tests.accounting.factories import make_allocation, make_request, set_price
from tests.scheduling.conftest import Fleet
from tests.support.personas import Org

pytestmark = pytest.mark.django_db
MONTH = date(2026, 6, 1)
START = datetime(2026, 6, 1, tzinfo=UTC)
NOW = datetime(2026, 6, 11, tzinfo=UTC)  # ten days into the month


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    runs=st.lists(
        st.tuples(
            st.sampled_from(["a100", "mig_1g", "l4_6g"]),
            st.integers(min_value=1, max_value=4),  # cards
            st.integers(min_value=0, max_value=9 * 24),  # start hour
            st.integers(min_value=1, max_value=48),  # hours
            st.booleans(),  # team A or team B
        ),
        max_size=8,
    )
)
def test_property_team_totals_plus_idle_equal_fleet_cost(
    org: Org, fleet: Fleet, settings: Any, runs: list[tuple[str, int, int, int, bool]]
) -> None:
    settings.BILLING_TIME_ZONE = "UTC"
    with transaction.atomic():
        Node.objects.update(created_at=START - timedelta(days=30))  # capacity all month
        # fleet cost, computed here from the raw runs: what ran at its price + idle at pool rate
        set_price(fleet.a100, "2.00")
        set_price(fleet.mig_1g, str(Decimal("3.50") * fleet.mig_1g.gpu_equivalent))
        set_price(fleet.mig_3g, str(Decimal("3.50") * fleet.mig_3g.gpu_equivalent))
        set_price(fleet.l4_6g, str(Decimal("0.80") * fleet.l4_6g.gpu_equivalent))
        set_price(fleet.l4_12g, str(Decimal("0.80") * fleet.l4_12g.gpu_equivalent))
        expected_used_cost = Decimal(0)
        used_hours: dict[int, Decimal] = {}
        for name, cards, start_hour, hours, is_a in runs:
            flavor = getattr(fleet, name)
            project = org.project_a if is_a else org.project_b
            owner = org.dev_a if is_a else org.dev_b
            request = make_request(project=project, owner=owner, flavor=flavor, gpu_count=cards)
            started = START + timedelta(hours=start_hour)
            make_allocation(request, started_at=started, ended_at=started + timedelta(hours=hours))
            ran = min(started + timedelta(hours=hours), NOW) - started
            price = flavor.prices.get().price_per_hour
            hours_ran = Decimal(ran.total_seconds()) / 3600
            expected_used_cost += price * cards * hours_ran
            used_hours[flavor.pool_id] = (
                used_hours.get(flavor.pool_id, Decimal(0)) + request.gpu_equivalent * hours_ran
            )
        meter_usage(now=NOW)
        report = chargeback(
            user=org.finance,
            query=UsageQuery(month_from=MONTH, month_to=MONTH, group_by=("team",)),
            now=NOW,
        )
        assert report.fleet is not None and report.idle is not None
        team_total = sum((row["cost"] for row in report.rows), Decimal(0))
        assert abs(team_total - expected_used_cost) < Decimal("0.0001")
        fleet_cost = Decimal(0)
        for pool in NodePool.objects.all():
            devices = GpuDevice.objects.filter(node__pool=pool).count()
            idle_hours = devices * Decimal(240) - used_hours.get(pool.pk, Decimal(0))
            fleet_cost += idle_hours * pool_rate(pool=pool, at=NOW)
        fleet_cost += expected_used_cost
        assert abs(team_total + report.fleet["idle_cost"] - fleet_cost) < Decimal("0.001")
        assert (
            report.fleet["fleet_cost"] == report.fleet["allocated_cost"] + report.fleet["idle_cost"]
        )
        for pool in report.idle:
            assert (
                pool["idle_gpu_hours"] + pool["allocated_gpu_hours"] == pool["capacity_gpu_hours"]
            )
        transaction.set_rollback(True)


def test_idle_capacity_counts_from_when_the_nodes_existed(
    org: Org, fleet: Fleet, settings: Any
) -> None:
    """A node the portal learned of on the 6th adds no idle hours for the 1st to the 5th."""
    settings.BILLING_TIME_ZONE = "UTC"
    pool = fleet.a100.pool
    Node.objects.update(created_at=START - timedelta(days=30))
    Node.objects.filter(pool=pool).update(created_at=START + timedelta(days=5))
    report = chargeback(
        user=org.finance,
        query=UsageQuery(month_from=MONTH, month_to=MONTH, group_by=("team",)),
        now=NOW,
    )
    assert report.idle is not None
    row = next(p for p in report.idle if p["pool_id"] == pool.pk)
    cards = GpuDevice.objects.filter(node__pool=pool).count()
    assert row["capacity_gpu_hours"] == Decimal(cards * 5 * 24)  # the 6th to the 11th


def test_work_that_ran_before_a_node_was_listed_shows_its_capacity_existed(
    org: Org, fleet: Fleet, settings: Any
) -> None:
    settings.BILLING_TIME_ZONE = "UTC"
    Node.objects.update(created_at=NOW)
    request = make_request(project=org.project_a, owner=org.dev_a, flavor=fleet.a100)
    make_allocation(
        request, started_at=START + timedelta(days=2), ended_at=START + timedelta(days=3)
    )
    report = chargeback(
        user=org.finance,
        query=UsageQuery(month_from=MONTH, month_to=MONTH, group_by=("team",)),
        now=NOW,
    )
    assert report.idle is not None
    row = next(p for p in report.idle if p["pool_id"] == fleet.a100.pool_id)
    cards = GpuDevice.objects.filter(node__pool=fleet.a100.pool).count()
    assert row["capacity_gpu_hours"] == Decimal(cards * 8 * 24)  # from the 3rd on
