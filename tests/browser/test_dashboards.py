"""Each role signs in and sees its dashboard with a chart drawn; finance's CSV matches the API."""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone
from openpyxl import load_workbook

from accounting.models import Budget
from accounting.services.metering import meter_usage
from scheduling.demo import seed_demo_fleet
from scheduling.models import Flavor
from tests.accounting.factories import make_allocation, make_request, set_price
from tests.support.personas import Org, make_org

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def org_with_usage(transactional_db: None) -> Org:
    org = make_org()
    seed_demo_fleet(teams={"vision": org.team_a, "speech": org.team_b})
    a100 = Flavor.objects.get(slug="a100-80g")
    set_price(a100, "2.50")
    now = timezone.now()
    for owner, project in ((org.dev_a, org.project_a), (org.dev_b, org.project_b)):
        request = make_request(project=project, owner=owner, flavor=a100)
        make_allocation(request, started_at=now - timedelta(minutes=90))
    meter_usage(now=now)
    Budget.objects.create(team=org.team_a, unit="money", amount=Decimal("10"))
    return org


def sign_in(browser: Any, live_server: Any, user: Any) -> Any:
    page = browser.new_page(accept_downloads=True)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.js_errors = errors
    page.goto(f"{live_server.url}/login/")
    page.fill("input[name=username]", user.username)
    page.fill("input[name=password]", "pw-" + user.username)
    page.click("form button[type=submit], form input[type=submit]")
    page.wait_for_selector("[data-testid=home-heading]")
    return page


CHART_DRAWN = """() => {
  const canvas = document.querySelector('canvas[data-testid=dashboard-chart]');
  const chart = canvas && window.Chart && window.Chart.getChart(canvas);
  return !!chart && chart.data.datasets.length > 0 && canvas.width > 0;
}"""


def chart_drawn(page: Any) -> bool:
    """Chart.js drew on the dashboard's canvas (waits for the page's scripts to run)."""
    page.wait_for_function(CHART_DRAWN, timeout=15_000)
    return not page.js_errors


@pytest.mark.parametrize(
    ("persona", "heading"),
    [
        ("dev_a", "My GPU work"),
        ("lead_a", "Team overview"),
        ("admin", "Platform administration"),
        ("finance", "GPU costs"),
    ],
)
def test_each_role_sees_its_dashboard_with_a_chart(
    browser: Any, live_server: Any, org_with_usage: Org, persona: str, heading: str
) -> None:
    page = sign_in(browser, live_server, getattr(org_with_usage, persona))
    try:
        assert page.inner_text("[data-testid=home-heading]") == heading
        assert chart_drawn(page)
    finally:
        page.close()


def test_finance_downloads_a_csv_whose_totals_match_the_api(
    browser: Any, live_server: Any, org_with_usage: Org
) -> None:
    page = sign_in(browser, live_server, org_with_usage.finance)
    try:
        with page.expect_download() as info:
            page.click("[data-testid=export-csv]")
        text = Path(info.value.path()).read_text(encoding="utf-8")
        rows = list(csv.DictReader(io.StringIO(text)))
        assert {row["team"] for row in rows} == {"Team A", "Team B"}
        response = page.request.get(
            f"{live_server.url}/api/v1/chargeback/?group_by=team,project,flavor"
        )
        assert response.ok
        api = response.json()
        assert sum(Decimal(row["cost"]) for row in rows) == Decimal(api["totals"]["cost"])
        assert sum(Decimal(row["gpu_hours"]) for row in rows) == Decimal(api["totals"]["gpu_hours"])
    finally:
        page.close()


NAMED_CHART_DRAWN = """(id) => {
  const canvas = document.querySelector(`canvas[data-testid=${id}]`);
  const chart = canvas && window.Chart && window.Chart.getChart(canvas);
  return !!chart && chart.data.datasets.length > 0 && canvas.width > 0;
}"""


@pytest.mark.parametrize(
    ("persona", "chart_id"),
    [
        ("dev_a", "efficiency-chart"),
        ("lead_a", "burndown-chart"),
        ("admin", "reclaim-chart"),
        ("finance", "trend-chart"),
    ],
)
def test_each_role_sees_its_new_chart_drawn(
    browser: Any, live_server: Any, org_with_usage: Org, persona: str, chart_id: str
) -> None:
    page = sign_in(browser, live_server, getattr(org_with_usage, persona))
    try:
        page.wait_for_function(NAMED_CHART_DRAWN, arg=chart_id, timeout=15_000)
        assert not page.js_errors
    finally:
        page.close()


def test_finance_downloads_an_xlsx_whose_totals_match_the_api(
    browser: Any, live_server: Any, org_with_usage: Org
) -> None:
    page = sign_in(browser, live_server, org_with_usage.finance)
    try:
        with page.expect_download() as info:
            page.click("[data-testid=export-xlsx]")
        sheet = load_workbook(io.BytesIO(Path(info.value.path()).read_bytes())).active
        assert sheet is not None
        values = list(sheet.iter_rows(values_only=True))
        header = [str(cell) for cell in values[0]]
        rows = [dict(zip(header, row, strict=True)) for row in values[1:]]
        response = page.request.get(
            f"{live_server.url}/api/v1/chargeback/?group_by=team,project,flavor"
        )
        api = response.json()
        assert sum(Decimal(str(row["cost"])) for row in rows) == Decimal(api["totals"]["cost"])
        page.click("[data-testid=drill-down] >> nth=0")
        # The drill-down stays in the portal: the team's cost by project on the report page.
        assert "/reports/" in page.url and "group_by=project" in page.url
        assert page.locator("table").first.is_visible()
    finally:
        page.close()
