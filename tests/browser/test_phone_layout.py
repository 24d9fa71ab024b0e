"""At 390 px the pages with tables of actions fit the screen: rows become cards, and the
buttons a lead or a developer needs are on screen without scrolling sideways."""

from __future__ import annotations

from typing import Any

import pytest
from knox.models import AuthToken

from tests.browser.test_dashboards import sign_in
from tests.support.factories import GpuRequestFactory
from tests.support.fleet import make_fleet
from tests.support.personas import Org, make_org

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PHONE = {"width": 390, "height": 844}
SCROLL_WIDTH = "() => document.documentElement.scrollWidth"


@pytest.fixture
def browser_org(transactional_db: None) -> Org:
    org = make_org()
    fleet = make_fleet(org)
    GpuRequestFactory.create(
        actor=org.dev_a, project=org.project_a, flavor=fleet.a100, name="a long training run"
    )
    return org


def _within_viewport(page: Any, selector: str) -> None:
    box = page.locator(selector).first.bounding_box()
    assert box is not None, selector
    assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], (selector, box)


def test_approvals_and_quotas_fit_a_phone(browser: Any, live_server: Any, browser_org: Org) -> None:
    page = sign_in(browser, live_server, browser_org.lead_a)
    try:
        page.set_viewport_size(PHONE)
        page.goto(f"{live_server.url}/approvals/")
        page.wait_for_selector("[data-testid=inbox-row]")
        assert page.evaluate(SCROLL_WIDTH) <= PHONE["width"]
        _within_viewport(page, "[data-testid=inbox-row] button:has-text('Approve')")
        _within_viewport(page, "[data-testid=inbox-row] button:has-text('Reject')")
        page.goto(f"{live_server.url}/quotas/")
        page.wait_for_selector("[data-testid=quota-card]")
        assert page.evaluate(SCROLL_WIDTH) <= PHONE["width"]
        _within_viewport(page, "[data-testid=quota-card] button:has-text('Save')")
        _within_viewport(page, "[data-testid=quota-card] input[name=guaranteed]")
        _within_viewport(page, "[data-testid=quota-card] input[name=limit]")
        assert not page.js_errors
    finally:
        page.close()


def test_the_tokens_page_fits_a_phone_once_a_token_exists(
    browser: Any, live_server: Any, browser_org: Org
) -> None:
    AuthToken.objects.create(user=browser_org.dev_a)
    page = sign_in(browser, live_server, browser_org.dev_a)
    try:
        page.set_viewport_size(PHONE)
        page.goto(f"{live_server.url}/account/tokens/")
        page.fill("#token-name", "laptop notebook")
        page.click("#token-panel button[type=submit]")
        page.wait_for_selector("[data-testid=new-token]")
        assert page.locator("[data-testid=token-row]").count() >= 2
        assert page.evaluate(SCROLL_WIDTH) <= PHONE["width"]
        _within_viewport(page, "[data-testid=token-row] button:has-text('Revoke')")
    finally:
        page.close()
