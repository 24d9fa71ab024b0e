"""Efficiency (allocated vs active GPU-hours) per request, project and team; right-sizing hint."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from scheduling.choices import RequestStatus
from scheduling.models import UtilisationSample
from tests.accounting.factories import make_allocation, make_request
from tests.scheduling.conftest import Fleet
from tests.support.cross_tenant import covers
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def runs(org: Org, fleet: Fleet) -> dict[str, Any]:
    """dev_a: a finished 2-hour A100 run at 10 % and 8 GB; dev_b: a running 1-hour one at 80 %."""
    now = timezone.now()
    done = make_request(
        project=org.project_a, owner=org.dev_a, flavor=fleet.a100, status=RequestStatus.SUCCEEDED
    )
    allocation = make_allocation(
        done, started_at=now - timedelta(hours=3), ended_at=now - timedelta(hours=1)
    )
    busy = make_request(project=org.project_b, owner=org.dev_b, flavor=fleet.a100)
    running = make_allocation(busy, started_at=now - timedelta(hours=1))
    for minute in range(0, 120, 30):
        at = now - timedelta(hours=3, minutes=-minute)
        UtilisationSample.objects.create(
            allocation=allocation, sampled_at=at, activity_percent=10, memory_used_mib=8000
        )
    for minute in (10, 20, 30):
        UtilisationSample.objects.create(
            allocation=running,
            sampled_at=now - timedelta(minutes=minute),
            activity_percent=80,
            memory_used_mib=70000,
        )
    return {"done": done, "busy": busy}


def test_request_efficiency_and_right_sizing(org: Org, runs: dict[str, Any]) -> None:
    url = reverse("gpu-request-efficiency", kwargs={"pk": runs["done"].pk})
    response = api_client(org.dev_a).get(url)
    assert response.status_code == 200, response.content
    body = response.json()
    assert Decimal(body["allocated_gpu_hours"]) == Decimal("2.00")
    assert Decimal(body["active_gpu_hours"]) == Decimal("0.20")
    assert Decimal(body["waste_gpu_hours"]) == Decimal("1.80")
    assert Decimal(body["efficiency_percent"]) == Decimal("10.0")
    assert body["peak_memory_mib"] == 8000
    # A MIG slice would hold it, but in another tier (other rules): the training tier has
    # nothing cheaper than a whole A100, so nothing is suggested.
    assert body["right_sizing"] is None


def test_right_sizing_suggests_a_cheaper_flavor_of_the_same_tier(org: Org, fleet: Fleet) -> None:
    now = timezone.now()
    done = make_request(
        project=org.project_a, owner=org.dev_a, flavor=fleet.mig_3g, status=RequestStatus.SUCCEEDED
    )
    allocation = make_allocation(
        done, started_at=now - timedelta(hours=2), ended_at=now - timedelta(hours=1)
    )
    for minute in (0, 20, 40):
        UtilisationSample.objects.create(
            allocation=allocation,
            sampled_at=now - timedelta(hours=2, minutes=-minute),
            activity_percent=20,
            memory_used_mib=6000,
        )
    body = (
        api_client(org.dev_a).get(reverse("gpu-request-efficiency", kwargs={"pk": done.pk})).json()
    )
    assert body["right_sizing"]["flavor"] == fleet.mig_1g.name


def test_running_work_gets_no_right_sizing_yet(org: Org, runs: dict[str, Any]) -> None:
    url = reverse("gpu-request-efficiency", kwargs={"pk": runs["busy"].pk})
    body = api_client(org.dev_b).get(url).json()
    assert Decimal(body["efficiency_percent"]) == Decimal("80.0")
    assert body["right_sizing"] is None


@covers("gpu-request-efficiency", "gpu-request-efficiency-page")
def test_other_teams_request_efficiency_is_404(org: Org, runs: dict[str, Any]) -> None:
    pk = runs["done"].pk
    for user in (org.dev_b, org.lead_b, org.finance):
        response = api_client(user).get(reverse("gpu-request-efficiency", kwargs={"pk": pk}))
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"
    page = Client()
    page.force_login(org.dev_b)
    assert page.get(reverse("gpu-request-efficiency-page", kwargs={"pk": pk})).status_code == 404
    page.force_login(org.dev_a)
    fragment = page.get(reverse("gpu-request-efficiency-page", kwargs={"pk": pk}))
    assert fragment.status_code == 200
    assert b'data-testid="efficiency-percent"' in fragment.content
    assert b'data-testid="cost-so-far"' in fragment.content


def test_efficiency_per_team_within_reach(org: Org, runs: dict[str, Any]) -> None:
    def rows(user: Any, **params: Any) -> dict[Any, Decimal]:
        response = api_client(user).get(reverse("efficiency"), params)
        assert response.status_code == 200, response.content
        return {r["team"]: Decimal(r["efficiency_percent"]) for r in response.json()["results"]}

    assert rows(org.finance, group_by="team") == {
        "Team A": Decimal("10.0"),
        "Team B": Decimal("80.0"),
    }
    assert rows(org.lead_a, group_by="team") == {"Team A": Decimal("10.0")}
    assert rows(org.dev_b, group_by="team") == {"Team B": Decimal("80.0")}


def test_efficiency_per_project_counts_waste(org: Org, runs: dict[str, Any]) -> None:
    response = api_client(org.lead_a).get(reverse("efficiency"), {"group_by": "project"})
    [row] = response.json()["results"]
    assert row["project"] == "A one" and Decimal(row["waste_gpu_hours"]) == Decimal("1.80")


@pytest.mark.parametrize("params", [{"group_by": "flavor"}, {"days": "0"}, {"days": "x"}])
def test_bad_efficiency_query_is_400(org: Org, params: dict[str, str]) -> None:
    response = api_client(org.finance).get(reverse("efficiency"), params)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid"


def test_efficiency_needs_a_role(org: Org) -> None:
    assert api_client(org.nobody).get(reverse("efficiency")).status_code == 403
    assert api_client(None).get(reverse("efficiency")).status_code == 401


@pytest.mark.parametrize("group_by", ["request", "project", "team"])
def test_efficiency_report_query_count_stays_flat_as_runs_grow(
    org: Org, fleet: Fleet, group_by: str, django_assert_max_num_queries: Any
) -> None:
    from accounting.selectors.efficiency import efficiency_rows

    def add_runs(count: int) -> None:
        for _ in range(count):
            request = make_request(project=org.project_a, owner=org.dev_a, flavor=fleet.a100)
            make_allocation(request, started_at=timezone.now() - timedelta(hours=1))

    add_runs(2)
    with django_assert_max_num_queries(3) as few:
        efficiency_rows(user=org.finance, group_by=group_by)
    add_runs(8)
    with django_assert_max_num_queries(len(few.captured_queries)):
        assert len(efficiency_rows(user=org.finance, group_by=group_by)) >= 1


def test_the_home_page_names_requests_and_their_projects(org: Org, runs: dict[str, Any]) -> None:
    done = runs["done"]
    done.name = "resnet sweep"
    done.save(update_fields=["name"])
    client = Client()
    client.force_login(org.dev_a)
    page = client.get(reverse("home"))
    table = page.content.decode().split('data-testid="efficiency-table"')[1].split("</table>")[0]
    row = table.split("<tbody>")[1].split("</tr>")[0]
    cells = [cell.split("</td>")[0] for cell in row.split("<td")[1:]]
    assert "resnet sweep (#" in cells[0] and cells[1].endswith(f">{org.project_a.name}")
    assert "×" not in table  # no "request 1025 (A100 80 GB × 4)" in a column of names
    chart = page.context["dashboard"]["efficiency_chart"]
    assert chart["labels"] == [f"resnet sweep (#{done.pk})"]
