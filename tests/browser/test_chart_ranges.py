"""The time-range picker changes what a chart shows (a link the server honours), drag zooms a
chart, and the pages with a picker fit a 390 px phone."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from scheduling.models import Allocation, GpuRequest, Node, UtilisationSample
from tests.accounting.factories import make_allocation, make_request
from tests.browser.test_dashboards import sign_in
from tests.support.fleet import make_fleet
from tests.support.personas import Org, make_org

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PHONE = {"width": 390, "height": 844}
SCROLL_WIDTH = "() => document.documentElement.scrollWidth"
CHART_POINTS = """(testid) => {
  const canvas = document.querySelector(`canvas[data-testid=${testid}]`);
  const chart = canvas && window.Chart && window.Chart.getChart(canvas);
  return chart ? chart.data.labels.length : -1;
}"""
CHART_DRAWN = f"(testid) => ({CHART_POINTS})(testid) > 0"


@pytest.fixture
def week_old_run(transactional_db: None) -> tuple[Org, GpuRequest, Node]:
    """A request of team A running for eight days, with activity on its first day and now."""
    org = make_org()
    fleet = make_fleet(org)
    request = make_request(
        project=org.project_a, owner=org.dev_a, flavor=fleet.a100, name="long run"
    )
    node = Node.objects.filter(pool=fleet.a100.pool).order_by("name").first()
    assert node is not None
    now = timezone.now()
    allocation = make_allocation(request, started_at=now - timedelta(days=8))
    Allocation.objects.filter(pk=allocation.pk).update(
        node_name=node.name, claims=[{"node": node.name, "device_index": 0, "whole": True}]
    )
    for ago, percent in ((timedelta(days=7, hours=20), 20.0), (timedelta(minutes=3), 90.0)):
        UtilisationSample.objects.create(
            allocation=allocation,
            sampled_at=now - ago,
            activity_percent=percent,
            memory_used_mib=2000,
        )
    return org, request, node


def test_the_picker_changes_a_node_charts_range_on_a_phone(
    browser: Any, live_server: Any, week_old_run: tuple[Org, GpuRequest, Node]
) -> None:
    org, _, node = week_old_run
    page = sign_in(browser, live_server, org.admin)
    try:
        page.set_viewport_size(PHONE)
        page.goto(f"{live_server.url}/fleet/nodes/{node.pk}/")
        page.wait_for_function(CHART_DRAWN, arg="node-activity")
        before = page.evaluate(CHART_POINTS, "node-activity")
        assert "a point every 30 minutes" in page.inner_text("[data-testid=chart-range]")
        assert page.evaluate(SCROLL_WIDTH) <= PHONE["width"]

        with page.expect_navigation():
            page.select_option("select[name=range]", "6h")
        assert "range=6h" in page.url
        page.wait_for_function(CHART_DRAWN, arg="node-activity")
        assert page.evaluate(CHART_POINTS, "node-activity") < before
        assert "a point every 15 minutes" in page.inner_text("[data-testid=chart-range]")
        assert page.evaluate(SCROLL_WIDTH) <= PHONE["width"]
        assert not page.js_errors
    finally:
        page.close()


def test_a_request_page_charts_its_whole_life_and_zooms(
    browser: Any, live_server: Any, week_old_run: tuple[Org, GpuRequest, Node]
) -> None:
    org, request, _ = week_old_run
    page = sign_in(browser, live_server, org.dev_a)
    try:
        page.set_viewport_size(PHONE)
        page.goto(f"{live_server.url}/requests/{request.pk}/")
        page.wait_for_function(CHART_DRAWN, arg="utilisation-chart")
        assert page.input_value("select[name=range]") == "life"
        first = page.evaluate(
            """() => window.Chart.getChart(
                 document.querySelector('canvas[data-testid=utilisation-chart]')
               ).data.datasets[0].data.find(v => v !== null)"""
        )
        assert first == 20.0  # the first day's activity, a week back
        assert page.evaluate(SCROLL_WIDTH) <= PHONE["width"]

        # A custom range: editing From/To picks "Custom" and Show applies it.
        page.fill("input[name=start]", "2026-01-01T00:00")
        page.fill("input[name=end]", "2026-01-02T00:00")
        assert page.input_value("select[name=range]") == "custom"

        # Drag across the chart zooms in; Reset zoom puts it back.
        canvas = page.locator("canvas[data-testid=utilisation-chart]")
        canvas.scroll_into_view_if_needed()
        box = canvas.bounding_box()
        assert box is not None
        y = box["y"] + box["height"] * 0.7  # in the plot, below the legend
        page.mouse.move(box["x"] + box["width"] * 0.3, y)
        page.mouse.down()
        page.mouse.move(box["x"] + box["width"] * 0.5, y, steps=5)
        page.mouse.move(box["x"] + box["width"] * 0.7, y, steps=5)
        page.mouse.up()
        page.wait_for_selector("[data-testid=reset-zoom]")
        page.click("[data-testid=reset-zoom]")
        assert page.locator("[data-testid=reset-zoom]").count() == 0

        with page.expect_navigation():
            page.click("[data-testid=range-picker] button[type=submit]")
        assert "range=custom" in page.url and "start=2026-01-01" in page.url
        assert page.input_value("input[name=start]") == "2026-01-01T00:00"
        assert page.evaluate(SCROLL_WIDTH) <= PHONE["width"]
        assert not page.js_errors
    finally:
        page.close()
