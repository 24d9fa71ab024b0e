"""CPU, memory and storage priced beside GPUs: the meter, the reports, their CSV and reach."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounting.choices import BudgetUnit, HostResource
from accounting.models import (
    Budget,
    DailyUsage,
    MonthlyUsage,
    ResourcePrice,
    TeamMonthlyUsage,
    UsageRecord,
)
from accounting.selectors.budgets import spent_of, with_burn
from accounting.selectors.inbox import lead_inbox
from accounting.selectors.usage import request_cost
from accounting.services.ingest import WITH_HOST_COSTS, ingest_usage
from accounting.services.metering import meter_usage
from scheduling.models import HomeVolume, ProjectWorkspace
from tenants.errors import DomainError
from tests.accounting.factories import make_allocation, make_request, set_price
from tests.scheduling.conftest import Fleet
from tests.support.factories import GpuRequestFactory
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db

OCTOBER = datetime(2026, 10, 1, tzinfo=UTC)
T0 = datetime(2026, 10, 10, 9, 0, tzinfo=UTC)


def set_resource_price(resource: str, per_hour: str, *, since: datetime = OCTOBER) -> None:
    ResourcePrice.objects.create(
        resource=resource, price_per_hour=Decimal(per_hour), effective_from=since
    )


@pytest.fixture(autouse=True)
def utc(settings: Any) -> None:
    settings.BILLING_TIME_ZONE = "UTC"
    settings.IDLE_COST_SHARING = "off"


@pytest.fixture
def october(org: Org, fleet: Fleet) -> dict[str, Any]:
    """Team A: 2 A100s with 4 cores and 16 GiB for 3 h (2.50, 0.03/core-h, 0.004/GiB-h), a
    100 GiB workspace and a 10 GiB home volume all October (0.0001/GiB-h). Team B: 1 A100 with
    2 cores and 8 GiB for 1 h, a 50 GiB workspace."""
    set_price(fleet.a100, "2.50")
    set_resource_price(HostResource.CPU, "0.03")
    set_resource_price(HostResource.MEMORY, "0.004")
    set_resource_price(HostResource.STORAGE, "0.0001")
    big = make_request(
        project=org.project_a,
        owner=org.dev_a,
        flavor=fleet.a100,
        gpu_count=2,
        cpu_millicores=4000,
        memory_mib=16 * 1024,
    )
    make_allocation(big, started_at=T0, ended_at=T0 + timedelta(hours=3))
    small = make_request(
        project=org.project_b,
        owner=org.dev_b,
        flavor=fleet.a100,
        cpu_millicores=2000,
        memory_mib=8 * 1024,
    )
    make_allocation(small, started_at=T0, ended_at=T0 + timedelta(hours=1))
    meter_usage(now=T0 + timedelta(days=1))
    workspace_a = ProjectWorkspace.objects.create(project=org.project_a, size_gib=100)
    home = HomeVolume.objects.create(workspace=workspace_a, user=org.dev_a, size_gib=10)
    workspace_b = ProjectWorkspace.objects.create(project=org.project_b, size_gib=50)
    before = OCTOBER - timedelta(days=3)
    ProjectWorkspace.objects.filter(pk__in=[workspace_a.pk, workspace_b.pk]).update(
        created_at=before
    )
    HomeVolume.objects.filter(pk=home.pk).update(created_at=before)
    return {"big": big, "small": small}


def get(user: Any, route: str, **params: Any) -> Any:
    return api_client(user).get(reverse(route), {"month": "2026-10", **params})


def money(row: dict[str, Any], *names: str) -> dict[str, Decimal]:
    return {name: Decimal(row[name]) for name in names}


COLUMNS = ("gpu_cost", "cpu_cost", "memory_cost", "storage_cost", "cost", "total_cost")


def test_metering_prices_requested_cores_and_memory_beside_the_gpus(org: Org, october: Any) -> None:
    record = UsageRecord.objects.get(allocation__request=october["big"])
    # GPU 2 × 3 h × 2.50 = 15; CPU 4 cores × 3 h × 0.03 = 0.36; memory 16 GiB × 3 h × 0.004
    assert (record.cost, record.cpu_cost, record.memory_cost) == (
        Decimal("15.552"),
        Decimal("0.36"),
        Decimal("0.192"),
    )
    for model in (MonthlyUsage, TeamMonthlyUsage, DailyUsage):
        row = model.objects.get(team=org.team_a)
        assert (row.cost, row.cpu_cost, row.memory_cost) == (
            Decimal("15.552"),
            Decimal("0.36"),
            Decimal("0.192"),
        ), model.__name__


def test_a_cpu_repricing_mid_run_splits_the_run(org: Org, fleet: Fleet) -> None:
    set_resource_price(HostResource.CPU, "0.03")
    set_resource_price(HostResource.CPU, "0.06", since=T0 + timedelta(hours=1))
    request = make_request(
        project=org.project_a, owner=org.dev_a, flavor=fleet.a100, cpu_millicores=4000
    )
    make_allocation(request, started_at=T0, ended_at=T0 + timedelta(hours=3))
    meter_usage(now=T0 + timedelta(hours=2))  # metered across the repricing, then the rest
    meter_usage(now=T0 + timedelta(hours=5))
    record = UsageRecord.objects.get()
    # 4 cores × 1 h × 0.03 + 4 cores × 2 h × 0.06; no GPU price: GPU part 0
    assert record.cpu_cost == Decimal("0.60") and record.cost == Decimal("0.60")
    assert record.memory_cost == 0


def test_chargeback_rows_carry_each_part_and_the_total(org: Org, october: Any) -> None:
    response = get(org.finance, "chargeback", group_by="team")
    assert response.status_code == 200, response.content
    rows = {row["team"]: money(row, *COLUMNS) for row in response.json()["results"]}
    # storage A: 110 GiB × 744 h × 0.0001 = 8.184; B: 50 GiB × 744 h × 0.0001 = 3.72
    assert rows["Team A"] == {
        "gpu_cost": Decimal("15"),
        "cpu_cost": Decimal("0.36"),
        "memory_cost": Decimal("0.192"),
        "storage_cost": Decimal("8.184"),
        "cost": Decimal("15.552"),
        "total_cost": Decimal("23.736"),
    }
    assert rows["Team B"] == {
        "gpu_cost": Decimal("2.5"),
        "cpu_cost": Decimal("0.06"),
        "memory_cost": Decimal("0.032"),
        "storage_cost": Decimal("3.72"),
        "cost": Decimal("2.592"),
        "total_cost": Decimal("6.312"),
    }
    totals = money(response.json()["totals"], *COLUMNS)
    assert totals["total_cost"] == Decimal("30.048")
    assert totals["storage_cost"] == Decimal("11.904")


def test_a_storage_repricing_mid_month_splits_the_month(org: Org, october: Any) -> None:
    set_resource_price(HostResource.STORAGE, "0.0002", since=datetime(2026, 10, 16, tzinfo=UTC))
    response = get(org.finance, "chargeback", group_by="project", team=org.team_b.pk)
    [row] = response.json()["results"]
    # 50 GiB × (15 days × 24 h × 0.0001 + 16 days × 24 h × 0.0002) = 1.8 + 3.84
    assert Decimal(row["storage_cost"]) == Decimal("5.64")


def test_storage_of_a_team_that_ran_nothing_gets_its_own_row(
    org: Org, fleet: Fleet, october: Any
) -> None:
    ProjectWorkspace.objects.create(project=org.project_a2, size_gib=20)
    ProjectWorkspace.objects.filter(project=org.project_a2).update(created_at=OCTOBER)
    response = get(org.lead_a, "chargeback", group_by="project")
    rows = {row["project"]: row for row in response.json()["results"]}
    assert set(rows) == {"A one", "A two"}
    assert Decimal(rows["A two"]["storage_cost"]) == Decimal("1.488")  # 20 × 744 × 0.0001
    assert Decimal(rows["A two"]["cost"]) == 0 and Decimal(rows["A two"]["gpu_hours"]) == 0


def test_grouped_by_flavor_storage_is_a_row_of_its_own(org: Org, october: Any) -> None:
    response = get(org.lead_a, "chargeback", group_by="flavor")
    rows = response.json()["results"]
    storage = [row for row in rows if row["flavor_id"] is None]
    assert [(row["flavor"], Decimal(row["storage_cost"])) for row in storage] == [
        ("Workspace storage", Decimal("8.184"))
    ]
    total = sum(Decimal(row["total_cost"]) for row in rows)
    assert total == Decimal(response.json()["totals"]["total_cost"]) == Decimal("23.736")


def test_csv_has_a_column_per_part(org: Org, october: Any) -> None:
    response = get(org.finance, "chargeback", group_by="team", export="csv")
    assert response.status_code == 200
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    header = list(rows[0])
    assert header[-8:] == [
        "gpu_hours",
        "cost",
        "gpu_cost",
        "cpu_cost",
        "memory_cost",
        "storage_cost",
        "total_cost",
        "currency",
    ]
    team_a = [row for row in rows if row["team"] == "Team A"]
    assert sum(Decimal(row["total_cost"]) for row in team_a) == Decimal("23.736")
    assert sum(Decimal(row["storage_cost"]) for row in team_a) == Decimal("8.184")
    assert sum(Decimal(row["cpu_cost"]) for row in team_a) == Decimal("0.36")


def test_a_lead_sees_only_their_teams_costs(org: Org, october: Any) -> None:
    response = get(org.lead_b, "chargeback", group_by="team,project")
    rows = response.json()["results"]
    assert {row["team_id"] for row in rows} == {org.team_b.pk}
    assert Decimal(response.json()["totals"]["storage_cost"]) == Decimal("3.72")
    assert Decimal(response.json()["totals"]["cpu_cost"]) == Decimal("0.06")
    refused = get(org.lead_b, "chargeback", group_by="project", team=org.team_a.pk)
    assert refused.status_code == 400
    assert refused.json()["error"]["fields"]["team"] == "No such team."
    csv_text = get(org.lead_b, "chargeback", group_by="team", export="csv").content.decode()
    assert "Team A" not in csv_text and "A one" not in csv_text


def test_a_developer_sees_their_own_cpu_and_memory_but_no_team_storage(
    org: Org, october: Any
) -> None:
    response = get(org.dev_a, "usage", group_by="project")
    [row] = response.json()["results"]
    assert money(row, "cpu_cost", "memory_cost", "storage_cost", "total_cost") == {
        "cpu_cost": Decimal("0.36"),
        "memory_cost": Decimal("0.192"),
        "storage_cost": Decimal(0),
        "total_cost": Decimal("15.552"),
    }
    assert get(org.dev_b, "usage", group_by="team").json()["results"][0]["team_id"] == (
        org.team_b.pk
    )


def test_report_page_shows_the_parts_in_columns(client: Any, org: Org, october: Any) -> None:
    client.force_login(org.finance)
    page = client.get(
        reverse("reports-page"), {"month_from": "2026-10", "month_to": "2026-10"}
    ).content.decode()
    for heading in ("GPU cost", "CPU cost", "Memory cost", "Storage cost"):
        assert f">{heading}</th>" in page
    assert 'data-testid="row-storage-cost">8.18</td>' in page
    assert 'data-testid="row-total-cost">23.74</td>' in page
    assert 'data-testid="report-cost">30.05</div>' in page


def test_money_budget_burns_cpu_and_memory_too(org: Org, fleet: Fleet) -> None:
    now = timezone.now()
    set_price(fleet.a100, "2.50")
    set_resource_price(HostResource.CPU, "0.03", since=now - timedelta(days=40))
    request = make_request(
        project=org.project_a, owner=org.dev_a, flavor=fleet.a100, cpu_millicores=10_000
    )
    start = now - timedelta(minutes=30)
    make_allocation(request, started_at=start, ended_at=now)
    meter_usage(now=now)
    budget = Budget.objects.create(team=org.team_a, unit=BudgetUnit.MONEY, amount=Decimal(100))
    spent = spent_of(with_burn(Budget.objects.filter(pk=budget.pk)).get())
    record = UsageRecord.objects.get()
    assert record.cpu_cost > 0
    assert spent == record.cost == (Decimal("2.50") + Decimal("0.30")) * Decimal("0.5")


def test_request_cost_per_hour_adds_cores_and_memory(org: Org, fleet: Fleet) -> None:
    set_price(fleet.a100, "2.50")
    set_resource_price(HostResource.CPU, "0.03")
    set_resource_price(HostResource.MEMORY, "0.004")
    request = make_request(
        project=org.project_a,
        owner=org.dev_a,
        flavor=fleet.a100,
        cpu_millicores=8000,
        memory_mib=32 * 1024,
    )
    # 2.50 + 8 × 0.03 + 32 × 0.004 = 2.868 an hour
    assert request_cost(request).per_hour == Decimal("2.87")


def test_the_request_forms_estimate_adds_the_flavors_default_cores_and_memory(
    org: Org, fleet: Fleet
) -> None:
    set_price(fleet.a100, "2.50")
    set_resource_price(HostResource.CPU, "0.03")
    set_resource_price(HostResource.MEMORY, "0.004")
    fleet.a100.default_cpu_millicores, fleet.a100.default_memory_mib = 8000, 64 * 1024
    fleet.a100.save()
    client = Client()
    client.force_login(org.dev_a)
    page = client.get(
        reverse("request-estimate"),
        {"project": org.project_a.pk, "flavor": fleet.a100.pk, "gpu_count": 2},
    ).content.decode()
    # 2 × 2.50 + 8 cores × 0.03 + 64 GiB × 0.004 = 5.496 an hour
    assert '<strong data-testid="cost-per-hour">5.50 EUR</strong>' in page


def test_the_inbox_prices_a_pending_requests_cores_and_memory(org: Org, fleet: Fleet) -> None:
    since = timezone.now() - timedelta(days=1)
    set_price(fleet.a100, "3", since=since)
    set_resource_price(HostResource.CPU, "0.05", since=since)
    set_resource_price(HostResource.MEMORY, "0.01", since=since)
    pending = GpuRequestFactory.create(
        project=org.project_a,
        flavor=fleet.a100,
        gpu_count=2,
        cpu_millicores=10_000,
        memory_mib=50 * 1024,
    )
    [row] = [row for row in lead_inbox(user=org.lead_a) if row.request.pk == pending.pk]
    # 2 × 3 + 10 cores × 0.05 + 50 GiB × 0.01 = 7 an hour
    assert row.cost_per_hour == Decimal(7)


def _piece(org: Org, fleet: Fleet, *amounts: str) -> tuple[Any, ...]:
    start = datetime(2026, 10, 10, 9, tzinfo=UTC)
    return (
        999_001, "2026-10-01", "2026-10-10", org.team_a.pk, org.project_a.pk, fleet.a100.pk,
        fleet.a100.pool_id, org.dev_a.pk, 1, "f", start.isoformat(),
        (start + timedelta(hours=1)).isoformat(), "3600", "1", *amounts,
    )  # fmt: skip


def test_imported_usage_may_carry_its_cpu_and_memory_parts(org: Org, fleet: Fleet) -> None:
    ingest_usage([_piece(org, fleet, "3", "0.2", "0.3")], columns=WITH_HOST_COSTS)
    ingest_usage([_piece(org, fleet, "2.5")])  # the older file shape: all GPU cost
    record = UsageRecord.objects.get()
    assert (record.cost, record.cpu_cost, record.memory_cost) == (
        Decimal("5.5"),
        Decimal("0.2"),
        Decimal("0.3"),
    )
    row = TeamMonthlyUsage.objects.get()
    assert (row.cost, row.cpu_cost, row.memory_cost) == (
        Decimal("5.5"),
        Decimal("0.2"),
        Decimal("0.3"),
    )


def test_an_import_whose_parts_exceed_the_cost_is_refused(org: Org, fleet: Fleet) -> None:
    with pytest.raises(DomainError) as refused:
        ingest_usage([_piece(org, fleet, "1", "0.8", "0.3")], columns=WITH_HOST_COSTS)
    assert refused.value.message.startswith("Line 1: a negative or not-a-number amount")
    assert not UsageRecord.objects.exists()
