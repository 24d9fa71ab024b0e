"""`/api/v1/usage/` and `/api/v1/chargeback/`: scoping, roles, filters, errors and CSV."""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone

from accounting.periods import billing_zone, month_bounds
from accounting.selectors.usage import current_month
from accounting.services.metering import meter_usage
from tests.accounting.factories import make_allocation, make_request, set_price
from tests.scheduling.conftest import Fleet
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def usage(org: Org, fleet: Fleet) -> dict[str, Any]:
    """Two hours on an A100 for dev_a and lead_a (team A), one hour for dev_b (team B)."""
    set_price(fleet.a100, "2.50")
    set_price(fleet.l4_6g, "0.25")
    start, _ = month_bounds(current_month(), billing_zone())
    start = max(start, timezone.now() - timedelta(hours=6))
    for owner, project, flavor, hours in (
        (org.dev_a, org.project_a, fleet.a100, 2),
        (org.lead_a, org.project_a2, fleet.l4_6g, 2),
        (org.dev_b, org.project_b, fleet.a100, 1),
    ):
        request = make_request(project=project, owner=owner, flavor=flavor)
        make_allocation(request, started_at=start, ended_at=start + timedelta(hours=hours))
    meter_usage(now=start + timedelta(hours=3))
    return {"start": start}


def get(user: Any, route: str, **params: Any) -> Any:
    return api_client(user).get(reverse(route), params)


def teams_in(response: Any) -> set[int]:
    return {row["team_id"] for row in response.json()["results"]}


def test_finance_sees_every_team_and_totals(org: Org, usage: Any) -> None:
    response = get(org.finance, "chargeback", group_by="team")
    assert response.status_code == 200, response.content
    body = response.json()
    assert teams_in(response) == {org.team_a.pk, org.team_b.pk}
    costs = {row["team"]: Decimal(row["cost"]) for row in body["results"]}
    assert costs == {"Team A": Decimal("5.5"), "Team B": Decimal("2.5")}
    assert Decimal(body["totals"]["cost"]) == Decimal("8")
    assert body["currency"] and body["fleet"] is not None
    fleet = body["fleet"]
    assert Decimal(fleet["allocated_cost"]) + Decimal(fleet["idle_cost"]) == Decimal(
        fleet["fleet_cost"]
    )


def test_lead_sees_only_their_team_and_no_fleet_figures(org: Org, usage: Any) -> None:
    response = get(org.lead_a, "chargeback", group_by="project,flavor")
    assert response.status_code == 200
    assert {row["project_id"] for row in response.json()["results"]} == {
        org.project_a.pk,
        org.project_a2.pk,
    }
    assert response.json()["fleet"] is None and response.json()["idle"] is None


def test_developer_usage_is_their_own(org: Org, usage: Any) -> None:
    response = get(org.dev_a, "usage", group_by="project,user")
    assert response.status_code == 200
    rows = response.json()["results"]
    assert [row["user"] for row in rows] == ["dev_a"]
    assert Decimal(rows[0]["gpu_hours"]) == Decimal(2)


def test_lead_sees_members_usage(org: Org, usage: Any) -> None:
    response = get(org.lead_a, "usage", group_by="user")
    assert {row["user"] for row in response.json()["results"]} == {"dev_a", "lead_a"}


def test_daily_series_from_rollups(org: Org, usage: Any) -> None:
    response = get(org.finance, "usage", group_by="team,day")
    assert response.status_code == 200
    total = sum(Decimal(row["gpu_hours"]) for row in response.json()["results"])
    assert total == Decimal("2") + Decimal("2") * Decimal("0.25") + Decimal("1")


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"month": "2026-13"}, "month"),
        ({"month": "december"}, "month"),
        ({"group_by": "team,colour"}, "group_by"),
        ({"team": "abc"}, "team"),
        ({"months": "0"}, "months"),
        ({"export": "pdf"}, "export"),
        ({"team": "999999"}, "team"),
        ({"group_by": "user,day"}, "group_by"),
    ],
)
def test_bad_filters_are_400_with_the_error_shape(
    org: Org, usage: Any, params: dict[str, str], field: str
) -> None:
    response = get(org.finance, "usage", **params)
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid" and field in error["fields"]


def test_other_teams_ids_do_not_exist_for_a_lead(org: Org, usage: Any) -> None:
    for route in ("usage", "chargeback"):
        for params in ({"team": org.team_b.pk}, {"project": org.project_b.pk}):
            response = get(org.lead_a, route, **params)
            assert response.status_code == 400
            assert response.json()["error"]["fields"] == {
                next(iter(params)): f"No such {next(iter(params))}."
            }
        assert org.team_b.pk not in teams_in(get(org.lead_a, route))
    assert org.team_b.pk not in teams_in(get(org.dev_a, "usage"))


def test_developer_may_not_export_chargeback_of_all_teams(org: Org, usage: Any) -> None:
    response = get(org.dev_a, "chargeback", export="csv")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden"


def test_user_without_role_is_403_and_anonymous_401(org: Org, usage: Any) -> None:
    assert get(org.nobody, "usage").status_code == 403
    response = get(None, "chargeback")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"


def test_csv_export_matches_the_json_and_neutralises_formulas(org: Org, usage: Any) -> None:
    org.team_a.name = '=HYPERLINK("http://evil")'
    org.team_a.save()
    response = get(org.finance, "chargeback", group_by="team,flavor", export="csv")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert {row["team"] for row in rows} == {'\'=HYPERLINK("http://evil")', "Team B"}
    api_total = Decimal(
        get(org.finance, "chargeback", group_by="team,flavor").json()["totals"]["cost"]
    )
    assert sum(Decimal(row["cost"]) for row in rows) == api_total


def test_months_reach_back(org: Org, usage: Any) -> None:
    response = get(org.finance, "chargeback", group_by="month", months=3)
    body = response.json()
    assert len(body["months"]) == 3
    assert [row["month"] for row in body["results"]] == [body["months"][-1]]


def test_a_drill_down_csv_names_team_and_project_and_its_filter_in_the_file_name(
    org: Org, usage: Any
) -> None:
    response = get(
        org.lead_a, "chargeback", group_by="user", project=org.project_a.pk, export="csv"
    )
    assert response.status_code == 200
    disposition = response["Content-Disposition"]
    assert f"chargeback-project-a-one-{current_month():%Y-%m}-by-user.csv" in disposition
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert list(rows[0])[:6] == ["user_id", "user", "team_id", "team", "project_id", "project"]
    assert [(row["user"], row["team"], row["project"]) for row in rows] == [
        ("dev_a", "Team A", "A one")
    ]


def test_a_team_wide_csv_splits_rows_by_project_with_the_same_total(org: Org, usage: Any) -> None:
    response = get(org.finance, "chargeback", group_by="team", team=org.team_a.pk, export="csv")
    assert (
        f'filename="chargeback-team-team-a-{current_month():%Y-%m}-by-team.csv"'
        in (response["Content-Disposition"])
    )
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert {(row["team"], row["project"]) for row in rows} == {
        ("Team A", "A one"),
        ("Team A", "A two"),
    }
    total = get(org.finance, "chargeback", group_by="team", team=org.team_a.pk).json()["totals"]
    assert sum(Decimal(row["cost"]) for row in rows) == Decimal(total["cost"])


def test_a_developers_usage_csv_holds_only_their_own_rows_with_team_and_project(
    org: Org, usage: Any
) -> None:
    response = get(org.dev_a, "usage", group_by="flavor", export="csv")
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert [(row["team"], row["project"]) for row in rows] == [("Team A", "A one")]
    assert 'filename="usage-' in response["Content-Disposition"]


def test_a_csv_filtered_to_another_teams_project_is_400_not_a_file(org: Org, usage: Any) -> None:
    response = get(
        org.lead_a, "chargeback", group_by="user", project=org.project_b.pk, export="csv"
    )
    assert response.status_code == 400
    assert "project" in response.json()["error"]["fields"]


@pytest.mark.parametrize("group_by", ["day", "month", "team,project", "pool", "cluster"])
def test_every_grouping_exports_with_team_and_project(org: Org, usage: Any, group_by: str) -> None:
    response = get(org.finance, "chargeback", group_by=group_by, export="csv")
    assert response.status_code == 200, response.content
    header = response.content.decode().splitlines()[0].split(",")
    assert {"team", "project"} <= set(header)
    assert f"-by-{group_by.replace(',', '-')}.csv" in response["Content-Disposition"]
