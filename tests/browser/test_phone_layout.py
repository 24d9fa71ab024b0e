"""At 390 px every table is a stack of cards: no page scrolls sideways, and the inputs and
buttons a lead or a developer needs are on screen. At 1280 px the tables stay tables."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from knox.models import AuthToken

from scheduling.choices import RequestStatus
from scheduling.models import Flavor, GpuRequest
from tenants.models import Project
from tests.browser.test_accessibility_walk import WIDTHS, Walk, check_page
from tests.browser.test_accessibility_walk import sign_in as sign_in_demo
from tests.browser.test_dashboards import sign_in
from tests.support.factories import GpuRequestFactory
from tests.support.fleet import make_fleet
from tests.support.personas import Org, make_org

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PHONE = {"width": 390, "height": 844}
SCROLL_WIDTH = "() => document.documentElement.scrollWidth"
NAV_LINKS = """() => Array.from(document.querySelectorAll("#main-nav a.nav-link"))
  .map(a => new URL(a.href).pathname)"""
FIRST_LINK = """(pattern) => {
  const link = Array.from(document.querySelectorAll("main a[href]"))
    .find(a => new RegExp(pattern).test(new URL(a.href).pathname));
  return link ? new URL(link.href).pathname : null;
}"""
# Pages that the nav does not list, followed from the first link of their kind on a page the
# user reaches through it.
FOLLOWED = {
    "/requests/": [r"^/requests/\d+/$"],
    "/fleet/": [r"^/fleet/pools/[^/]+/$"],
    "/fleet/pools/N/": [r"^/fleet/nodes/\d+/$"],
    "/reports/": [r"^/reports/statements/$"],
    "/reports/statements/": [r"^/reports/statements/\d+/$"],
}
# What each demo user must have seen, at the least.
MUST_SEE = {
    "alice": {"/requests/", "/quotas/", "/reports/", "/account/tokens/", "/requests/N/"},
    "bob": {"/approvals/", "/quotas/", "/audit/", "/reports/", "/account/tokens/", "/requests/N/"},
    "fiona": {"/reports/", "/budgets/", "/reports/sharing/", "/account/tokens/"},
    "root": {
        "/fleet/",
        "/fleet/pools/N/",
        "/fleet/nodes/N/",
        "/audit/",
        "/approvals/",
        "/quotas/",
        "/requests/N/",
    },
}


@pytest.fixture
def browser_org(transactional_db: None) -> Org:
    org = make_org()
    fleet = make_fleet(org)
    GpuRequestFactory.create(
        actor=org.dev_a, project=org.project_a, flavor=fleet.a100, name="a long training run"
    )
    return org


@pytest.fixture
def demo_approval(demo: None) -> GpuRequest:
    """A request of alice's in the demo that waits for bob, so that his inbox has buttons."""
    alice = get_user_model().objects.get(username="alice")
    request = GpuRequestFactory.create(
        actor=alice,
        project=Project.objects.get(team__slug="vision", slug="detection"),
        flavor=Flavor.objects.get(slug="a100-80g"),
        gpu_count=2,
        name="a long training run that waits for its lead",
    )
    assert request.status == RequestStatus.PENDING_APPROVAL
    return request


def _within_viewport(page: Any, selector: str) -> None:
    width = page.evaluate("() => window.innerWidth")
    box = page.locator(selector).first.bounding_box()
    assert box is not None, selector
    assert box["x"] >= 0 and box["x"] + box["width"] <= width, (selector, box)


def _shape(path: str) -> str:
    """`/requests/12/` and `/fleet/pools/a100/` as `/requests/N/` and `/fleet/pools/N/`."""
    return re.sub(r"^/fleet/pools/[^/]+/", "/fleet/pools/N/", re.sub(r"/\d+(?=/)", "/N", path))


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


@pytest.mark.parametrize("username", list(MUST_SEE))
def test_each_demo_user_sees_cards_on_a_phone_and_tables_on_a_desktop(
    page_at: Any, live_server: Any, demo_approval: GpuRequest, username: str
) -> None:
    """Every page of the user's nav, and a detail page behind each list, at both widths: no
    sideways scroll, no serious or critical axe violation, tables as cards at 390 px and as
    tables at 1280 px (`check_page`)."""
    base = live_server.url
    sign_in_demo(page_at, base, username)
    pages = [*page_at.evaluate(NAV_LINKS), "/account/tokens/", "/notifications/"]
    walk = Walk(username)
    seen: set[str] = set()
    for path in pages:
        if path in seen:
            continue
        seen.add(path)
        response = page_at.goto(base + path)
        assert response is not None and response.status == 200, path
        for pattern in FOLLOWED.get(_shape(path), []):
            if link := page_at.evaluate(FIRST_LINK, pattern):
                pages.append(link)
        if path == "/account/tokens/":
            page_at.fill("#token-name", "a laptop with a long name")
            page_at.click("#token-panel button[type=submit]")
            page_at.wait_for_selector("[data-testid=new-token]")
        for width_name in WIDTHS:
            check_page(page_at, walk, path, width_name)
        page_at.set_viewport_size({"width": WIDTHS["desktop"], "height": 900})
    print(f"{username}: {sorted(seen)}")
    assert MUST_SEE[username] <= {_shape(path) for path in seen}, sorted(seen)
    assert not walk.problems, "\n".join(walk.problems)


def test_a_lead_decides_and_splits_quota_on_a_phone(
    page_at: Any, live_server: Any, demo_approval: GpuRequest
) -> None:
    base = live_server.url
    page_at.set_viewport_size(PHONE)
    sign_in_demo(page_at, base, "bob")
    page_at.goto(f"{base}/approvals/")
    row = f"#inbox-approval-{demo_approval.pk}"
    page_at.wait_for_selector(row)
    assert page_at.evaluate(SCROLL_WIDTH) <= PHONE["width"]
    labels = page_at.locator(f"{row} > td[data-label]").evaluate_all(
        "cells => cells.map(c => getComputedStyle(c, '::before').content)"
    )
    assert '"Why it needs you"' in labels and '"Decision"' in labels, labels
    _within_viewport(page_at, f"{row} button:has-text('Approve')")
    _within_viewport(page_at, f"{row} button:has-text('Reject')")
    _within_viewport(page_at, f"{row} input[name=comment]")
    page_at.click(f"{row} button:has-text('Approve')")
    page_at.wait_for_selector(f"{row} button:has-text('Reject')", state="detached")
    demo_approval.refresh_from_db()
    assert demo_approval.status != RequestStatus.PENDING_APPROVAL
    assert page_at.evaluate(SCROLL_WIDTH) <= PHONE["width"]

    page_at.goto(f"{base}/quotas/")
    card = "[data-testid=quota-card]:has(input[name=guaranteed])"
    page_at.wait_for_selector(card)
    assert page_at.evaluate(SCROLL_WIDTH) <= PHONE["width"]
    for field in ("guaranteed", "limit"):
        _within_viewport(page_at, f"{card} input[name={field}]")
    _within_viewport(page_at, f"{card} button:has-text('Save')")
    page_at.set_viewport_size({"width": WIDTHS["desktop"], "height": 900})
    header = page_at.locator(f"{card} thead").first
    assert header.evaluate("h => getComputedStyle(h).display") == "table-header-group"


def test_a_long_token_wraps_on_a_phone(page_at: Any, live_server: Any, demo: None) -> None:
    base = live_server.url
    page_at.set_viewport_size(PHONE)
    sign_in_demo(page_at, base, "alice")
    page_at.goto(f"{base}/account/tokens/")
    page_at.fill("#token-name", "x" * 60)
    page_at.click("#token-panel button[type=submit]")
    page_at.wait_for_selector("[data-testid=new-token]")
    assert page_at.evaluate(SCROLL_WIDTH) <= PHONE["width"]
    _within_viewport(page_at, "[data-testid=new-token]")
    _within_viewport(page_at, "[data-testid=token-row] button:has-text('Revoke')")
