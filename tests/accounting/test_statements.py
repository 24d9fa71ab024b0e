"""Closed monthly statements: frozen against later metering and repricing; roles; exports."""

from __future__ import annotations

import csv
import io
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.urls import reverse
from openpyxl import load_workbook

from accounting.models import MonthlyUsage, Price, Statement
from accounting.periods import billing_zone, month_bounds
from accounting.selectors.usage import current_month
from accounting.services.metering import meter_usage
from tenants.models import AuditEvent
from tests.accounting.factories import make_allocation, make_request, set_price
from tests.scheduling.conftest import Fleet
from tests.support.api_contract import ApiContract
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db


def previous_month(month: date) -> date:
    return date(month.year - 1, 12, 1) if month.month == 1 else month.replace(month=month.month - 1)


@pytest.fixture
def last_month(org: Org, fleet: Fleet) -> dict[str, Any]:
    """Team A ran 3 A100-hours at 2.00 last month; team B 1 hour."""
    set_price(fleet.a100, "2.00")
    month = previous_month(current_month())
    start, _ = month_bounds(month, billing_zone())
    for owner, project, hours in ((org.dev_a, org.project_a, 3), (org.dev_b, org.project_b, 1)):
        request = make_request(project=project, owner=owner, flavor=fleet.a100)
        make_allocation(request, started_at=start, ended_at=start + timedelta(hours=hours))
    meter_usage(now=start + timedelta(hours=4))
    return {"month": month, "start": start}


def close(user: Any, team: Any, month: str) -> Any:
    return api_client(user).post(
        reverse("statement-close"), {"team": team.pk, "month": month}, format="json"
    )


def test_finance_closes_a_month_and_later_metering_does_not_change_it(
    org: Org, fleet: Fleet, last_month: dict[str, Any]
) -> None:
    month = f"{last_month['month']:%Y-%m}"
    response = close(org.finance, org.team_a, month)
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["month"] == month and Decimal(body["cost"]) == Decimal("6")
    assert [(line["project"], Decimal(line["gpu_hours"])) for line in body["lines"]] == [
        ("A one", Decimal("3"))
    ]
    # Late usage of the closed month, and a repricing: the ledger moves, the statement not.
    request = make_request(project=org.project_a, owner=org.dev_a, flavor=fleet.a100)
    start = last_month["start"] + timedelta(hours=5)
    make_allocation(request, started_at=start, ended_at=start + timedelta(hours=2))
    Price.objects.update(price_per_hour=Decimal("9"))
    meter_usage(now=start + timedelta(hours=3))
    live = MonthlyUsage.objects.filter(team=org.team_a, period=last_month["month"])
    assert sum(row.gpu_hours for row in live) == Decimal("5")
    again = api_client(org.lead_a).get(reverse("statement-detail", kwargs={"pk": body["id"]}))
    assert again.status_code == 200
    assert Decimal(again.json()["cost"]) == Decimal("6")
    assert Decimal(again.json()["lines"][0]["gpu_hours"]) == Decimal("3")
    assert AuditEvent.objects.filter(action="statement.closed", team=org.team_a).count() == 1


def test_closing_twice_changes_nothing(org: Org, last_month: dict[str, Any]) -> None:
    month = f"{last_month['month']:%Y-%m}"
    first = close(org.admin, org.team_a, month)
    second = close(org.finance, org.team_a, month)
    assert (first.status_code, second.status_code) == (201, 200)
    assert first.json()["id"] == second.json()["id"]
    assert Statement.objects.count() == 1


def test_the_current_month_cannot_be_closed(org: Org) -> None:
    response = close(org.finance, org.team_a, f"{current_month():%Y-%m}")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "month_not_over"


@pytest.mark.parametrize("month", ["2026-13", "26-01", "", "1999-01"])
def test_bad_month_is_400(org: Org, month: str) -> None:
    response = close(org.finance, org.team_a, month)
    assert response.status_code == 400
    assert "month" in response.json()["error"]["fields"]


@pytest.mark.parametrize("who", ["lead_a", "dev_a"])
def test_only_finance_and_admins_close(org: Org, who: str, last_month: dict[str, Any]) -> None:
    response = close(getattr(org, who), org.team_a, f"{last_month['month']:%Y-%m}")
    assert response.status_code == 403
    assert not Statement.objects.exists()


def test_who_reads_which_statements(org: Org, last_month: dict[str, Any]) -> None:
    month = f"{last_month['month']:%Y-%m}"
    a = close(org.finance, org.team_a, month).json()["id"]
    b = close(org.finance, org.team_b, month).json()["id"]

    def ids(user: Any) -> set[int]:
        response = api_client(user).get(reverse("statement-list"))
        assert response.status_code == 200
        return {row["id"] for row in response.json()["results"]}

    assert ids(org.finance) == ids(org.admin) == {a, b}
    assert ids(org.lead_a) == {a}
    assert ids(org.dev_a) == set()
    assert api_client(None).get(reverse("statement-list")).status_code == 401


STATEMENTS = ApiContract(
    basename="statement",
    subject=lambda world: Statement.objects.create(
        team=world.org.team_a, period=date(2026, 1, 1), currency="EUR", gpu_hours=0, cost=0
    ),
    may_read={"admin", "finance", "lead_a"},
    list_filters=lambda world: [{"team": world.org.team_a.pk}],
)
test_statements_api_contract = STATEMENTS.tests()


def test_another_teams_statement_is_not_exported(org: Org, last_month: dict[str, Any]) -> None:
    pk = close(org.finance, org.team_a, f"{last_month['month']:%Y-%m}").json()["id"]
    response = api_client(org.lead_b).get(
        reverse("statement-detail", kwargs={"pk": pk}), {"export": "csv"}
    )
    assert response.status_code == 404


def test_statement_exports_match_its_lines(org: Org, last_month: dict[str, Any]) -> None:
    org.project_a.name = "=cmd|' /C calc'!A0"
    org.project_a.save()
    pk = close(org.finance, org.team_a, f"{last_month['month']:%Y-%m}").json()["id"]
    url = reverse("statement-detail", kwargs={"pk": pk})
    client = api_client(org.lead_a)
    rows = list(csv.DictReader(io.StringIO(client.get(url, {"export": "csv"}).content.decode())))
    assert [(row["project"], Decimal(row["cost"])) for row in rows] == [
        ("'=cmd|' /C calc'!A0", Decimal("6"))
    ]
    content = client.get(url, {"export": "xlsx"}).content
    sheet = load_workbook(io.BytesIO(content)).active
    assert sheet is not None
    values = list(sheet.iter_rows(values_only=True))
    assert values[1][1] == "'=cmd|' /C calc'!A0" and values[1][5] == 6
    assert client.get(url, {"export": "pdf"}).status_code == 400
