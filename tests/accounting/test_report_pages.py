"""Finance's report pages in the portal: month range, grouping, drill-down that stays in the
portal, statements; and "fleet cost" meaning one thing in the figure and in the chart."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounting.selectors.dashboards import finance
from accounting.services.metering import meter_usage
from accounting.services.statements import close_statement
from tests.accounting.factories import make_allocation, make_request, set_price
from tests.scheduling.conftest import Fleet
from tests.support.cross_tenant import covers
from tests.support.personas import Org

pytestmark = pytest.mark.django_db


def login(user: object) -> Client:
    client = Client()
    client.force_login(user)  # type: ignore[arg-type]
    return client


@pytest.fixture
def usage(org: Org, fleet: Fleet) -> None:
    """Two hours of an A100 for team A, one of an L4 share for team B, this month."""
    set_price(fleet.a100, "2.00")
    set_price(fleet.l4_6g, "0.50")
    now = timezone.now()
    for project, owner, flavor, hours in (
        (org.project_a, org.dev_a, fleet.a100, 2),
        (org.project_b, org.dev_b, fleet.l4_6g, 1),
    ):
        request = make_request(project=project, owner=owner, flavor=flavor)
        make_allocation(request, started_at=now - timedelta(hours=hours), ended_at=now)
    meter_usage(now=now)


def test_report_groups_by_team_and_drills_down_inside_the_portal(
    org: Org, fleet: Fleet, usage: None
) -> None:
    client = login(org.finance)
    page = client.get(reverse("reports-page"), {"group_by": "team"}).content.decode()
    assert org.team_a.name in page and org.team_b.name in page
    links = re.findall(r'href="([^"]+)" data-testid="drill-down"', page)
    assert links and all(link.startswith(reverse("reports-page")) for link in links)
    team_a = next(link for link in links if f"team={org.team_a.pk}" in link)
    drilled = client.get(team_a.replace("&amp;", "&")).content.decode()
    assert 'data-testid="report-filters"' in drilled and org.project_a.name in drilled
    assert org.team_b.name not in drilled.split('data-testid="report-table"')[1]


@pytest.mark.parametrize("key", ["team", "project", "user", "pool", "flavor"])
def test_report_groups_by_every_key(org: Org, fleet: Fleet, usage: None, key: str) -> None:
    response = login(org.finance).get(reverse("reports-page"), {"group_by": key})
    assert response.status_code == 200
    assert 'data-testid="report-table"' in response.content.decode()


def test_report_refuses_a_backwards_range(org: Org) -> None:
    response = login(org.finance).get(
        reverse("reports-page"), {"month_from": "2026-06", "month_to": "2026-01"}
    )
    assert response.status_code == 400
    assert 'data-testid="error-month_from"' in response.content.decode()


def test_lead_reports_on_own_team_only(org: Org, fleet: Fleet, usage: None) -> None:
    client = login(org.lead_a)
    page = client.get(reverse("reports-page"), {"group_by": "team"}).content.decode()
    table = page.split('data-testid="report-table"')[1]
    assert org.team_a.name in table and org.team_b.name not in table
    other = client.get(reverse("reports-page"), {"team": org.team_b.pk})
    assert other.status_code == 400


@covers("statement-page", "statements-page")
def test_statements_page_lists_closed_months_within_reach(
    org: Org, fleet: Fleet, settings: object
) -> None:
    month = (timezone.now().replace(day=1) - timedelta(days=1)).date().replace(day=1)
    statement, _ = close_statement(actor=org.finance, team=org.team_a, month=month)
    page = login(org.finance).get(reverse("statements-page")).content.decode()
    assert reverse("statement-page", args=[statement.pk]) in page
    assert login(org.finance).get(reverse("statement-page", args=[statement.pk])).status_code == 200
    assert login(org.lead_b).get(reverse("statement-page", args=[statement.pk])).status_code == 404
    assert login(org.dev_a).get(reverse("statements-page")).status_code == 404


def test_fleet_cost_is_the_same_in_the_figure_and_the_chart(
    org: Org, fleet: Fleet, usage: None
) -> None:
    dashboard = finance(org.finance)
    figure = dashboard["this_month"].fleet["fleet_cost"]
    trend = dashboard["trend_chart"]["datasets"][0]["data"]
    assert abs(Decimal(str(trend[-1])) - figure) < Decimal("0.01")
    assert figure > dashboard["this_month"].fleet["allocated_cost"]  # idle capacity is in it


def test_a_lead_reaches_reports_and_statements_from_the_dashboard(org: Org) -> None:
    page = login(org.lead_a).get(reverse("home")).content.decode()
    assert reverse("reports-page") in page and reverse("statements-page") in page


def test_a_developers_report_labels_the_cost_as_their_own_requests(
    org: Org, fleet: Fleet, usage: None
) -> None:
    page = login(org.dev_a).get(reverse("reports-page"), {"group_by": "team"}).content.decode()
    assert 'data-testid="report-whose">Your requests<' in page
    assert 'data-testid="report-own-note"' in page
    assert "for your requests" in page
    assert "charged to teams" not in page


def test_a_leads_and_finances_reports_say_which_teams_they_sum(
    org: Org, fleet: Fleet, usage: None
) -> None:
    lead = login(org.lead_a).get(reverse("reports-page")).content.decode()
    assert f'data-testid="report-whose">Team {org.team_a.name}<' in lead
    assert 'data-testid="report-own-note"' not in lead
    everyone = login(org.finance).get(reverse("reports-page")).content.decode()
    assert 'data-testid="report-whose">All teams<' in everyone
    narrowed = login(org.finance).get(reverse("reports-page"), {"team": org.team_b.pk})
    assert f'data-testid="report-whose">Team {org.team_b.name}<' in narrowed.content.decode()
