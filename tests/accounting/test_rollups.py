"""Rollups equal the ledger, whichever path wrote it (meter or bulk ingest), and reports agree.

Chargeback reads `TeamMonthlyUsage`; it must give exactly what summing the ledger gives, or
finance's numbers would depend on which table answered.
"""

from __future__ import annotations

import io
from collections import defaultdict
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection, transaction
from django.db.models import Sum
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accounting.models import DailyUsage, MonthlyUsage, TeamMonthlyUsage, UsageRecord
from accounting.selectors.usage import UsageQuery, usage_rows
from accounting.services.ingest import ingest_usage, ingest_usage_csv
from accounting.services.metering import meter_usage
from tenants.errors import DomainError
from tests.accounting.factories import make_allocation, make_request, set_price
from tests.scheduling.conftest import Fleet
from tests.support.personas import Org

pytestmark = pytest.mark.django_db
postgres_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="bulk ingest uses COPY (PostgreSQL)"
)
ORIGIN = datetime(2026, 1, 20, 13, 7, tzinfo=UTC)
SIX_PLACES = Decimal("0.000001")


def grouped(model: Any, *keys: str) -> dict[tuple[Any, ...], tuple[Decimal, Decimal]]:
    """{key: (gpu_hours, cost)} with zero groups left out, to the ledger's 6 places (SQLite
    sums decimals as floats)."""
    out = {}
    for row in model.objects.values(*keys).annotate(h=Sum("gpu_hours"), c=Sum("cost")):
        if row["h"] or row["c"]:
            hours, cost = (Decimal(str(row[k])).quantize(SIX_PLACES) for k in ("h", "c"))
            out[tuple(row[k] for k in keys)] = (hours, cost)
    return out


def assert_rollups_equal_ledger() -> None:
    team_keys = ("period", "team_id", "flavor_id", "pool_id")
    assert grouped(TeamMonthlyUsage, *team_keys) == grouped(UsageRecord, *team_keys)
    keys = ("period", "team_id", "project_id", "flavor_id", "pool_id")
    assert grouped(MonthlyUsage, *keys) == grouped(UsageRecord, *keys)
    total = grouped(UsageRecord, "team_id")
    assert grouped(DailyUsage, "team_id") == total


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    runs=st.lists(
        st.tuples(
            st.integers(0, 2),  # which project / team
            st.integers(0, 2),  # which flavor
            st.integers(0, 120 * 24 * 60),  # start (minutes after ORIGIN)
            st.integers(0, 45 * 24 * 60),  # length in minutes
        ),
        min_size=1,
        max_size=6,
    ),
    meter_times=st.lists(st.integers(0, 170 * 24 * 60), max_size=3),
)
def test_property_metered_team_rollup_equals_the_ledger(
    org: Org, fleet: Fleet, runs: list[tuple[int, int, int, int]], meter_times: list[int]
) -> None:
    """Random runs over teams, projects and flavors, metered at random moments."""
    with transaction.atomic():
        flavors = [fleet.l4_6g, fleet.a100, fleet.mig_1g]
        set_price(fleet.l4_6g, "0.7")
        set_price(fleet.a100, "3.1")  # mig_1g unpriced: hours count, cost is zero
        owners = {org.project_a: org.dev_a, org.project_a2: org.dev_a, org.project_b: org.dev_b}
        projects = list(owners)
        for which, flavor, start_min, length_min in runs:
            project = projects[which]
            request = make_request(project=project, owner=owners[project], flavor=flavors[flavor])
            start = ORIGIN + timedelta(minutes=start_min)
            make_allocation(
                request, started_at=start, ended_at=start + timedelta(minutes=length_min)
            )
        for minutes in sorted(meter_times):
            meter_usage(now=ORIGIN + timedelta(minutes=minutes))
        meter_usage(now=ORIGIN + timedelta(days=200))
        assert_rollups_equal_ledger()
        transaction.set_rollback(True)


def test_chargeback_from_team_rollup_equals_grouping_the_ledger(org: Org, fleet: Fleet) -> None:
    set_price(fleet.l4_6g, "0.7")
    set_price(fleet.a100, "3.1")
    for project, owner, flavor, hours in (
        (org.project_a, org.dev_a, fleet.l4_6g, 5),
        (org.project_a2, org.dev_a, fleet.l4_6g, 7),
        (org.project_a2, org.dev_a, fleet.a100, 3),
        (org.project_b, org.dev_b, fleet.a100, 11),
    ):
        request = make_request(project=project, owner=owner, flavor=flavor)
        make_allocation(request, started_at=ORIGIN, ended_at=ORIGIN + timedelta(hours=hours))
    meter_usage(now=ORIGIN + timedelta(days=1))
    month = date(2026, 1, 1)
    query = UsageQuery(month_from=month, month_to=month, group_by=("team", "flavor"))
    rows = usage_rows(user=org.finance, query=query)
    ledger = grouped(UsageRecord, "team_id", "flavor_id")
    assert {(r["team_id"], r["flavor_id"]): (r["gpu_hours"], r["cost"]) for r in rows} == ledger
    # the project-level table gives the same answer when asked per project and summed
    per_project = UsageQuery(
        month_from=month, month_to=month, group_by=("team", "project", "flavor")
    )
    summed: dict[tuple[int, int], Decimal] = defaultdict(Decimal)
    for r in usage_rows(user=org.finance, query=per_project):
        summed[(r["team_id"], r["flavor_id"])] += r["cost"]
    assert summed == {key: cost for key, (_, cost) in ledger.items()}
    assert {(r["team_id"], r["flavor_id"]) for r in rows} == set(ledger)
    # a lead sees only their team from the team rollup
    lead_rows = usage_rows(user=org.lead_b, query=query)
    assert {r["team_id"] for r in lead_rows} == {org.team_b.pk}


def piece(
    allocation_id: int,
    day: date,
    project: Any,
    flavor: Any,
    owner: Any,
    hours: str,
    cost: str,
) -> tuple[Any, ...]:
    began = datetime(day.year, day.month, day.day, 1, tzinfo=UTC)
    seconds = Decimal(hours) * 3600
    return (
        allocation_id,
        day.replace(day=1),
        day,
        project.team_id,
        project.pk,
        flavor.pk,
        flavor.pool_id,
        owner.pk,
        1,
        False,
        began,
        began + timedelta(seconds=int(seconds)),
        seconds,
        Decimal(hours),
        Decimal(cost),
    )


@postgres_only
def test_bulk_ingest_keeps_ledger_and_every_rollup_current(org: Org, fleet: Fleet) -> None:
    a, a2, b = org.project_a, org.project_a2, org.project_b
    rows = [
        piece(1, date(2026, 1, 30), a, fleet.l4_6g, org.dev_a, "2.5", "1.75"),
        piece(1, date(2026, 1, 31), a, fleet.l4_6g, org.dev_a, "24", "16.8"),  # same month
        piece(1, date(2026, 2, 1), a, fleet.l4_6g, org.dev_a, "3", "2.1"),  # next month
        piece(2, date(2026, 1, 31), a2, fleet.a100, org.dev_a, "1.000001", "3.100003"),
        piece(3, date(2026, 1, 31), b, fleet.a100, org.dev_b, "4", "12.4"),
    ]
    assert ingest_usage(rows[:2]) == 2
    assert ingest_usage(rows[2:]) == 3
    ledger = {
        (r.allocation_id, r.period): (r.seconds, r.gpu_hours, r.cost, r.started_at, r.ended_at)
        for r in UsageRecord.objects.all()
    }
    assert ledger[(1, date(2026, 1, 1))][:3] == (
        Decimal(26.5 * 3600),
        Decimal("26.5"),
        Decimal("18.55"),
    )
    assert ledger[(1, date(2026, 1, 1))][3] == rows[0][10]
    assert ledger[(1, date(2026, 1, 1))][4] == rows[1][11]
    assert ledger[(1, date(2026, 2, 1))][2] == Decimal("2.1")
    assert len(ledger) == 4
    assert_rollups_equal_ledger()
    assert grouped(DailyUsage, "day", "project_id") == {
        (date(2026, 1, 30), a.pk): (Decimal("2.5"), Decimal("1.75")),
        (date(2026, 1, 31), a.pk): (Decimal("24"), Decimal("16.8")),
        (date(2026, 2, 1), a.pk): (Decimal("3"), Decimal("2.1")),
        (date(2026, 1, 31), a2.pk): (Decimal("1.000001"), Decimal("3.100003")),
        (date(2026, 1, 31), b.pk): (Decimal("4"), Decimal("12.4")),
    }
    # a later batch that continues a ledger row grows it (summed and upserted)
    assert ingest_usage([piece(3, date(2026, 1, 30), b, fleet.a100, org.dev_b, "1", "3.1")]) == 1
    assert UsageRecord.objects.get(allocation_id=3).cost == Decimal("15.5")
    assert_rollups_equal_ledger()
    # CSV text is the same path
    csv_row = ",".join(
        str(v) for v in piece(9, date(2026, 3, 2), b, fleet.a100, org.dev_b, "2", "6")
    )
    assert ingest_usage_csv(io.StringIO(csv_row + "\n")) == 1
    assert UsageRecord.objects.get(allocation_id=9).gpu_hours == Decimal(2)
    assert_rollups_equal_ledger()
    # the bulk path and the meter add to the same rows
    request = make_request(project=a, owner=org.dev_a, flavor=fleet.l4_6g)
    set_price(fleet.l4_6g, "0.7")
    start = datetime(2026, 1, 31, 10, tzinfo=UTC)
    make_allocation(request, started_at=start, ended_at=start + timedelta(hours=2))
    meter_usage(now=start + timedelta(days=1))
    assert_rollups_equal_ledger()
    team_month = TeamMonthlyUsage.objects.get(
        period=date(2026, 1, 1), team=org.team_a, flavor=fleet.l4_6g
    )
    metered_hours = 2 * fleet.l4_6g.gpu_equivalent  # 2 h of one unit at 0.7/h
    assert team_month.gpu_hours == Decimal("26.5") + metered_hours
    assert team_month.cost == Decimal("18.55") + Decimal("1.4")


@postgres_only
@pytest.mark.parametrize(
    "change, field",
    [
        ({4: 999_999}, "project"),  # unknown project
        ({3: "other team"}, "project"),  # project outside its team
        ({5: 999_999}, "flavor"),
        ({6: 999_999}, "pool"),
        ({7: 999_999}, "owner"),
        ({14: Decimal("-1")}, "amounts"),
        ({1: date(2026, 2, 1)}, "amounts"),  # period is not the day's month
    ],
)
def test_bulk_ingest_refuses_bad_rows_and_writes_nothing(
    org: Org, fleet: Fleet, change: dict[int, Any], field: str
) -> None:
    good = piece(1, date(2026, 1, 31), org.project_a, fleet.l4_6g, org.dev_a, "1", "0.7")
    bad = list(piece(2, date(2026, 1, 31), org.project_a, fleet.l4_6g, org.dev_a, "1", "0.7"))
    for index, value in change.items():
        bad[index] = org.team_b.pk if value == "other team" else value
    with pytest.raises(DomainError) as raised:
        ingest_usage([good, tuple(bad)])
    assert field in raised.value.fields
    assert not UsageRecord.objects.exists()
    assert not MonthlyUsage.objects.exists() and not TeamMonthlyUsage.objects.exists()
    assert not DailyUsage.objects.exists()
    assert ingest_usage([good]) == 1  # the session's staging table is empty again
    assert UsageRecord.objects.get().gpu_hours == Decimal(1)


@postgres_only
@pytest.mark.django_db(transaction=True)
def test_bulk_ingest_works_in_a_session_that_already_used_temporary_tables(
    org: Org, fleet: Fleet
) -> None:
    """The staging buffers cannot be resized then; ingest keeps the session's and goes on."""
    connection.close()  # a new session, whatever earlier tests did with this one
    with connection.cursor() as cursor:
        cursor.execute("SET temp_buffers = '9MB'")
        cursor.execute("CREATE TEMP TABLE unrelated_scratch (n integer)")
        cursor.execute("INSERT INTO unrelated_scratch VALUES (1)")
    row = piece(1, date(2026, 1, 31), org.project_a, fleet.l4_6g, org.dev_a, "2", "1.4")

    assert ingest_usage([row]) == 1
    assert ingest_usage([]) == 0
    with connection.cursor() as cursor:
        cursor.execute("SHOW temp_buffers")
        assert cursor.fetchone()[0] == "9MB"
    assert UsageRecord.objects.get(allocation_id=1).gpu_hours == Decimal(2)
    assert_rollups_equal_ledger()
