"""A developer waiting on their notebook's page sees it start without reloading: the page
reloads itself when the request moves, and then offers Open."""

from __future__ import annotations

from typing import Any

import pytest

from scheduling.models import GpuRequest
from tests.browser.test_dashboards import sign_in
from tests.support.factories import GpuRequestFactory, catch_up, report_running
from tests.support.fleet import make_fleet
from tests.support.personas import Org, make_org

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def launching_notebook(transactional_db: None) -> tuple[Org, GpuRequest]:
    org = make_org()
    fleet = make_fleet(org)
    notebook = GpuRequestFactory.create(
        actor=org.dev_a, project=org.project_a, flavor=fleet.l4_12g, kind="notebook"
    )
    catch_up(notebook, "launching")
    return org, notebook


def test_the_request_page_shows_the_notebook_start_without_a_reload(
    browser: Any, live_server: Any, launching_notebook: tuple[Org, GpuRequest]
) -> None:
    org, notebook = launching_notebook
    page = sign_in(browser, live_server, org.dev_a)
    try:
        page.goto(f"{live_server.url}/requests/{notebook.pk}/")
        assert page.inner_text("[data-testid=status]") == "Launching"
        assert page.locator("[data-testid=open-workload]").count() == 0
        page.evaluate("window.notReloaded = true")

        report_running(notebook)
        page.wait_for_selector("[data-testid=open-workload]", timeout=10_000)
        assert page.inner_text("[data-testid=status]") == "Running"
        assert page.evaluate("window.notReloaded") is None  # the page itself was reloaded
        assert page.locator("[data-testid=status-watch]").count() == 0
        assert page.js_errors == []
    finally:
        page.close()
