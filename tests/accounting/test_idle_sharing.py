"""Idle capacity cost shared back to the teams, by usage share or by guarantee share: the
shares follow the rule, and charged + idle shared = capacity cost, exactly."""

from __future__ import annotations

import csv
import io
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from hypothesis import given
from hypothesis import strategies as st

from accounting.selectors.idle_sharing import split_exactly
from accounting.selectors.usage import Chargeback, UsageQuery, chargeback
from accounting.services.metering import meter_usage
from scheduling.models import Node, Quota
from tests.accounting.factories import make_allocation, make_request, set_price
from tests.scheduling.conftest import Fleet
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db
MONTH = date(2026, 6, 1)
START = datetime(2026, 6, 1, tzinfo=UTC)
NOW = datetime(2026, 6, 11, tzinfo=UTC)


def _price_everything(fleet: Fleet) -> None:
    set_price(fleet.a100, "2.00")
    for flavor in (fleet.mig_1g, fleet.mig_3g):
        set_price(flavor, str(Decimal("3.50") * flavor.gpu_equivalent))
    for flavor in (fleet.l4_6g, fleet.l4_12g):
        set_price(flavor, str(Decimal("0.80") * flavor.gpu_equivalent))


def _run(org: Org, fleet: Fleet, *, team_a_hours: int, team_b_hours: int) -> None:
    """A100 work in June: 2 cards for team A, 1 card for team B, the hours given."""
    Node.objects.update(created_at=START - timedelta(days=30))
    _price_everything(fleet)
    for project, owner, cards, hours in (
        (org.project_a, org.dev_a, 2, team_a_hours),
        (org.project_b, org.dev_b, 1, team_b_hours),
    ):
        if hours:
            request = make_request(project=project, owner=owner, flavor=fleet.a100, gpu_count=cards)
            make_allocation(request, started_at=START, ended_at=START + timedelta(hours=hours))
    meter_usage(now=NOW)


def _report(org: Org, group_by: tuple[str, ...] = ("team",)) -> Chargeback:
    query = UsageQuery(month_from=MONTH, month_to=MONTH, group_by=group_by)
    return chargeback(user=org.finance, query=query, now=NOW)


def _reconciles(report: Chargeback) -> None:
    """Charged + idle shared (+ unshared) = capacity cost, in the rows and in the summary."""
    sharing, fleet_cost = report.idle_sharing, report.fleet
    assert sharing is not None and fleet_cost is not None
    charged = sum((row["cost"] for row in report.rows), Decimal(0))
    shared = sum((row["idle_share"] for row in report.rows), Decimal(0))
    assert charged + shared + sharing.unshared_cost == fleet_cost["fleet_cost"]
    assert sharing.capacity_cost == fleet_cost["fleet_cost"]
    assert sharing.allocated_cost + sharing.shared_cost + sharing.unshared_cost == (
        sharing.capacity_cost
    )
    assert sum((t["idle_share"] for t in sharing.teams), Decimal(0)) == sharing.shared_cost
    for row in report.rows:
        assert row["cost_with_idle"] == row["cost"] + row["idle_share"]


def test_by_usage_share_each_team_carries_idle_in_proportion_to_its_gpu_hours(
    org: Org, fleet: Fleet, settings: Any
) -> None:
    settings.BILLING_TIME_ZONE, settings.IDLE_COST_SHARING = "UTC", "usage"
    _run(org, fleet, team_a_hours=10, team_b_hours=30)  # 20 and 30 GPU-hours: 40 % and 60 %
    report = _report(org)
    sharing = report.idle_sharing
    assert sharing is not None and sharing.rule == "usage" and sharing.unshared_cost == 0
    assert sharing.idle_cost == report.fleet["idle_cost"] > 0  # type: ignore[index]
    share = {row["team_id"]: row["idle_share"] for row in report.rows}
    assert abs(share[org.team_a.pk] - sharing.idle_cost * Decimal("0.4")) <= Decimal("0.000001")
    assert abs(share[org.team_b.pk] - sharing.idle_cost * Decimal("0.6")) <= Decimal("0.000001")
    _reconciles(report)


def test_by_guarantee_share_each_pool_follows_the_teams_guarantees_in_it(
    org: Org, fleet: Fleet, settings: Any
) -> None:
    """A100 pool: A guaranteed 1 card, B 3; L4 pool: only A; H100 pool: nobody, so it is
    shared by the fleet's guarantees. B ran nothing and still carries its part of the idle."""
    settings.BILLING_TIME_ZONE, settings.IDLE_COST_SHARING = "UTC", "guarantee"
    Quota.objects.filter(project__isnull=True).delete()
    for team, flavor, guaranteed in (
        (org.team_a, fleet.a100, 1),
        (org.team_b, fleet.a100, 3),
        (org.team_a, fleet.l4_12g, 2),
    ):
        Quota.objects.create(team=team, flavor=flavor, guaranteed=guaranteed, limit=guaranteed)
    _run(org, fleet, team_a_hours=10, team_b_hours=0)
    report = _report(org)
    sharing = report.idle_sharing
    assert sharing is not None and sharing.rule == "guarantee"
    assert report.idle is not None
    idle = {pool["pool_id"]: pool["idle_cost"] for pool in report.idle}
    l4_units = 2 * fleet.l4_12g.gpu_equivalent
    fleet_a = (1 + l4_units) / (4 + l4_units)  # A's share of every guaranteed GPU-equivalent
    expected_a = (
        idle[fleet.a100.pool_id] / 4
        + idle[fleet.l4_12g.pool_id]
        + idle[fleet.mig_1g.pool_id] * fleet_a
    )
    rows = {row["team_id"]: row for row in report.rows}
    assert abs(rows[org.team_a.pk]["idle_share"] - expected_a) <= Decimal("0.00001")
    assert rows[org.team_b.pk]["cost"] == 0 and rows[org.team_b.pk]["idle_share"] > 0
    _reconciles(report)


def test_usage_and_guarantee_rules_differ_on_the_same_fleet(
    org: Org, fleet: Fleet, settings: Any
) -> None:
    settings.BILLING_TIME_ZONE = "UTC"
    Quota.objects.filter(project__isnull=True).delete()
    Quota.objects.create(team=org.team_b, flavor=fleet.a100, guaranteed=4, limit=4)
    _run(org, fleet, team_a_hours=10, team_b_hours=0)
    settings.IDLE_COST_SHARING = "usage"
    by_usage = {t["team_id"]: t["idle_share"] for t in _report(org).idle_sharing.teams}  # type: ignore[union-attr]
    settings.IDLE_COST_SHARING = "guarantee"
    by_guarantee = {t["team_id"]: t["idle_share"] for t in _report(org).idle_sharing.teams}  # type: ignore[union-attr]
    assert by_usage.get(org.team_b.pk, Decimal(0)) == 0  # B used nothing
    assert by_guarantee.get(org.team_a.pk, Decimal(0)) == 0  # A is guaranteed nothing
    assert sum(by_usage.values()) == sum(by_guarantee.values()) > 0


def test_rows_below_the_team_split_its_share_and_still_reconcile(
    org: Org, fleet: Fleet, settings: Any
) -> None:
    settings.BILLING_TIME_ZONE, settings.IDLE_COST_SHARING = "UTC", "usage"
    _run(org, fleet, team_a_hours=10, team_b_hours=30)
    by_team = {row["team_id"]: row["idle_share"] for row in _report(org).rows}
    report = _report(org, ("team", "project", "flavor"))
    for team_id, share in by_team.items():
        assert sum(r["idle_share"] for r in report.rows if r["team_id"] == team_id) == share
    _reconciles(report)
    by_month = _report(org, ("team", "month"))  # idle spans the months: not on monthly rows
    assert by_month.idle_sharing is not None
    assert all("idle_share" not in row for row in by_month.rows)


def test_off_leaves_idle_a_fleet_line(org: Org, fleet: Fleet, settings: Any) -> None:
    settings.BILLING_TIME_ZONE, settings.IDLE_COST_SHARING = "UTC", "off"
    _run(org, fleet, team_a_hours=10, team_b_hours=30)
    report = _report(org)
    assert report.idle_sharing is None and report.fleet is not None
    assert all("idle_share" not in row for row in report.rows)


@given(
    total=st.integers(min_value=0, max_value=10**12),
    weights=st.lists(st.integers(min_value=0, max_value=10**9), min_size=1, max_size=12),
)
def test_split_exactly_adds_up_to_the_micro_unit(total: int, weights: list[int]) -> None:
    amount = Decimal(total) / 10**6
    parts = split_exactly(amount, {i: Decimal(w) / 7 for i, w in enumerate(weights)})
    if any(weights):
        assert sum(parts.values()) == amount
        assert all(part >= 0 for part in parts.values())
    else:
        assert parts == {}


# The API, the CSV and the page ----------------------------------------------------------------


@pytest.fixture
def this_month(org: Org, fleet: Fleet, settings: Any) -> None:
    """Work this month on a fleet whose nodes existed all month."""
    settings.IDLE_COST_SHARING = "usage"
    now = timezone.now()
    Node.objects.update(created_at=now - timedelta(days=40))
    _price_everything(fleet)
    for project, owner, hours in ((org.project_a, org.dev_a, 2), (org.project_b, org.dev_b, 3)):
        request = make_request(project=project, owner=owner, flavor=fleet.a100)
        make_allocation(request, started_at=now - timedelta(hours=hours), ended_at=now)
    meter_usage(now=now)


def test_api_reports_the_rule_the_shares_and_they_reconcile(org: Org, this_month: None) -> None:
    body = api_client(org.finance).get(reverse("chargeback"), {"group_by": "team"}).json()
    sharing = body["idle_sharing"]
    assert sharing["rule"] == "usage" and "usage share" in sharing["rule_label"]
    charged = sum(Decimal(row["cost"]) for row in body["results"])
    shared = sum(Decimal(row["idle_share"]) for row in body["results"])
    assert charged + shared + Decimal(sharing["unshared_cost"]) == Decimal(
        body["fleet"]["fleet_cost"]
    )
    assert Decimal(sharing["capacity_cost"]) == Decimal(body["fleet"]["fleet_cost"])
    assert shared == Decimal(sharing["idle_cost"]) > 0


def test_a_lead_sees_no_idle_sharing_of_the_fleet(org: Org, this_month: None) -> None:
    body = api_client(org.lead_a).get(reverse("chargeback"), {"group_by": "team"}).json()
    assert body["idle_sharing"] is None and body["fleet"] is None
    assert [row["team_id"] for row in body["results"]] == [org.team_a.pk]
    assert all("idle_share" not in row for row in body["results"])
    refused = api_client(org.lead_a).get(reverse("chargeback"), {"team": org.team_b.pk})
    assert refused.status_code == 400 and "No such team" in refused.content.decode()


def test_csv_carries_the_idle_share_columns_and_their_sums(org: Org, this_month: None) -> None:
    client = api_client(org.finance)
    body = client.get(reverse("chargeback"), {"group_by": "team"}).json()
    response = client.get(reverse("chargeback"), {"group_by": "team", "export": "csv"})
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert {"idle_share", "cost_with_idle", "project"} <= set(rows[0])
    shared = sum(Decimal(r["idle_share"]) for r in rows)
    charged = sum(Decimal(r["cost"]) for r in rows)
    assert sum(Decimal(r["cost_with_idle"]) for r in rows) == charged + shared
    assert charged == sum(Decimal(r["cost"]) for r in body["results"])
    # idle grows with the clock between the two calls: the same figure within a second of it
    assert abs(shared - Decimal(body["idle_sharing"]["shared_cost"])) < Decimal("0.1")


def test_the_page_names_the_rule_the_idle_total_and_the_column(org: Org, this_month: None) -> None:
    client = Client()
    client.force_login(org.finance)
    page = client.get(reverse("reports-page"), {"group_by": "team"}).content.decode()
    assert "shared back to the teams by usage share" in page
    assert "Idle share" in page and 'data-testid="row-idle-share"' in page
    assert "= capacity cost" in page
    client.force_login(org.lead_a)
    lead_page = client.get(reverse("reports-page"), {"group_by": "team"}).content.decode()
    assert "Idle share" not in lead_page and "shared back" not in lead_page


def test_the_finance_home_names_the_rule_and_links_to_the_shares(
    org: Org, this_month: None, settings: Any
) -> None:
    client = Client()
    client.force_login(org.finance)
    home = client.get(reverse("home")).content.decode()
    assert 'data-testid="idle-rule"' in home and "by usage share" in home
    settings.IDLE_COST_SHARING = "off"
    assert 'data-testid="idle-rule"' not in client.get(reverse("home")).content.decode()
