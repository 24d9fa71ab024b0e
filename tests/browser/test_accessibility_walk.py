"""Each demo user walks every portal page they can reach on the seeded demo, at desktop and
phone width, and axe-core (npm, injected by Playwright) finds no serious or critical violation.
The demo is a few minutes into its day (tests/support/demo_work.py), so that the home pages'
tables of running and queued work, waiting reasons and notices have rows.

The walk starts at the role's home page and follows the links the pages offer (the nav, then
the links inside each page), one page per URL shape (`/requests/12/` and `/requests/13/` are
one shape), same origin only. It leaves out what is not a portal page: the API itself, the
Django admin, downloads, sign-out and the workloads' own hosts (/connect/); the API
documentation (Swagger UI, /api/docs/) is walked once it has rendered. On each page, at
1280 px and at 390 px, it checks: no serious or critical axe violation, no sideways scrolling
(`document.documentElement.scrollWidth <= innerWidth`, whatever sticks out), and every table
laid out for the width: a table at 1280 px, a stack of cards at 390 px (no table box scrolls
sideways there either). At 390 px the navigation is collapsed behind its toggler.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.conf import settings

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

AXE = Path(settings.BASE_DIR) / "node_modules" / "axe-core" / "axe.min.js"
WIDTHS = {"desktop": 1280, "phone": 390}
BLOCKING = {"serious", "critical"}
# Not portal pages, or not pages at all.
SKIPPED = re.compile(
    r"^/(api/(?!docs/)|admin/|logout/|static/|healthz|readyz|metrics|oidc/|w/|connect/)"
    r"|/(export|download)|[?&](format|export)=|\.(csv|xlsx|json)$"
)
MAX_PAGES = 80
# Pages drawn by script after they load: what shows they are ready to be checked.
READY = {"/api/docs/": ".swagger-ui .opblock-summary"}
# Every demo user, by role and team.
ROLES = {
    "developer": "alice",
    "team lead": "bob",
    "developer of Speech": "carol",
    "team lead of Speech": "dan",
    "finance": "fiona",
    "platform admin": "root",
}

AXE_RUN = """async () => {
  const result = await axe.run(document, {resultTypes: ["violations"]});
  return result.violations.map(v => ({
    id: v.id, impact: v.impact, help: v.help,
    targets: v.nodes.slice(0, 3).map(n => n.target.join(" ")),
    why: (v.nodes[0].any[0] || v.nodes[0].all[0] || v.nodes[0].none[0] || {}).message || "",
  }));
}"""
# The page's width when it scrolls sideways, and the first elements that stick out (outside
# boxes that scroll on their own, which the table check below judges).
SIDEWAYS = """() => {
  const width = window.innerWidth;
  const page = document.documentElement.scrollWidth;
  if (page <= width) return [];
  const wide = Array.from(document.querySelectorAll("body *"))
    .filter(e => e.getBoundingClientRect().right > width + 1)
    .filter(e => !e.closest(".table-responsive, .overflow-auto, pre"))
    .slice(0, 3).map(e => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "")
      + (e.className && typeof e.className === "string" ? "." + e.className.split(" ")[0] : ""));
  return [`page ${page} px wide in ${width} px`, ...wide];
}"""
# How each table of the page is laid out: its header row's and first body row's display, and
# whether the box around it scrolls sideways.
TABLES = """() => Array.from(document.querySelectorAll("main table.table")).map((table, i) => {
  const row = table.tBodies.length && table.tBodies[0].rows[0];
  const box = table.closest(".table-responsive") || table;
  return {
    name: table.dataset.testid || "table " + (i + 1),
    head: table.tHead ? getComputedStyle(table.tHead).display : "none",
    row: row ? getComputedStyle(row).display : "",
    scrolls: box.scrollWidth > box.clientWidth + 1,
  };
})"""
# What a table looks like at each width: cards on a phone, a table on a desktop.
TABLE_LAYOUT = {"phone": ("none", "block"), "desktop": ("table-header-group", "table-row")}
LINKS = """() => Array.from(document.querySelectorAll("a[href]"))
  .map(a => a.href).filter(h => h.startsWith(location.origin))"""


@dataclass
class Walk:
    """What one role's walk saw: the pages, and what went wrong where."""

    role: str
    pages: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def shape(path: str) -> str:
    """The URL's shape: ids become `N`, the query string is dropped."""
    return re.sub(r"/\d+(?=/|$)", "/N", urlsplit(path).path)


def sign_in(page: Any, base_url: str, username: str) -> None:
    page.goto(f"{base_url}/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", settings.DEMO_PASSWORD)
    page.click("form button[type=submit], form input[type=submit]")
    page.wait_for_selector("[data-testid=home-heading]")


def check_page(page: Any, walk: Walk, path: str, width_name: str) -> None:
    page.set_viewport_size({"width": WIDTHS[width_name], "height": 900})
    page.wait_for_timeout(150)  # let the layout (and Chart.js) settle at the new width
    if not page.evaluate("() => typeof axe !== 'undefined'"):
        page.add_script_tag(path=str(AXE))
    for violation in page.evaluate(AXE_RUN):
        if violation["impact"] in BLOCKING:
            walk.problems.append(
                f"{path} @{width_name}: {violation['impact']} {violation['id']} "
                f"({violation['help']}) at {violation['targets']}: {violation['why']}"
            )
    head, row = TABLE_LAYOUT[width_name]
    for table in page.evaluate(TABLES):
        if (
            (width_name == "phone" and table["scrolls"])
            or table["head"] != head
            or table["row"] not in ("", row)
        ):
            walk.problems.append(
                f"{path} @{width_name}: {table['name']} is not laid out as "
                f"{'cards' if width_name == 'phone' else 'a table'}: {table}"
            )
    overflowing = page.evaluate(SIDEWAYS)
    if overflowing:
        walk.problems.append(f"{path} @{width_name}: scrolls sideways; too wide: {overflowing}")
    if width_name == "phone":
        nav_links = page.locator("#main-nav")
        if page.locator(".navbar-toggler").count() and nav_links.is_visible():
            walk.problems.append(f"{path} @phone: the navigation is not collapsed")


def walk_role(page: Any, base_url: str, role: str) -> Walk:
    walk = Walk(role)
    sign_in(page, base_url, ROLES[role])
    queue = ["/"]
    seen_shapes: set[str] = set()
    while queue and len(walk.pages) < MAX_PAGES:
        path = queue.pop(0)
        if shape(path) in seen_shapes or SKIPPED.search(path):
            continue
        seen_shapes.add(shape(path))
        response = page.goto(base_url + path)
        if response is None or response.status >= 400:
            walk.problems.append(f"{path}: answered {response.status if response else 'nothing'}")
            continue
        walk.pages.append(path)
        if shape(path) in READY:
            page.wait_for_selector(READY[shape(path)], timeout=30_000)
        for width_name in WIDTHS:
            check_page(page, walk, path, width_name)
        for href in page.evaluate(LINKS):
            parts = urlsplit(href)
            link = parts.path + (f"?{parts.query}" if parts.query else "")
            if shape(link) not in seen_shapes and not SKIPPED.search(link):
                queue.append(link)
    return walk


@pytest.mark.parametrize("role", list(ROLES))
def test_every_page_of_each_role_passes_axe_and_fits_a_phone(
    page_at: Any, live_server: Any, demo_at_work: None, role: str
) -> None:
    walk = walk_role(page_at, live_server.url, role)
    (Path(settings.BASE_DIR) / "var" / f"axe-walk-{role.replace(' ', '-')}.txt").write_text(
        "\n".join([*walk.pages, "", *walk.problems]), encoding="utf-8"
    )
    print(f"{role}: {len(walk.pages)} pages x {len(WIDTHS)} widths: {walk.pages}")
    assert len(walk.pages) >= 3, f"{role} reached only {walk.pages}"
    assert len(walk.pages) < MAX_PAGES, f"{role}: the walk stopped at {MAX_PAGES} pages"
    assert not walk.problems, f"{role}: " + "\n".join(walk.problems)


def test_the_phone_menu_opens_with_its_toggler(page_at: Any, live_server: Any, demo: None) -> None:
    page_at.set_viewport_size({"width": 390, "height": 800})
    sign_in(page_at, live_server.url, "alice")
    menu = page_at.locator("#main-nav")
    assert not menu.is_visible()
    page_at.click(".navbar-toggler")
    page_at.wait_for_selector("#main-nav.show")
    assert menu.get_by_role("link", name="Request GPUs").is_visible()
    page_at.click("[data-testid=whoami]")
    assert menu.get_by_role("link", name="API tokens").is_visible()


def test_the_live_estimate_sends_its_csrf_token_in_a_header_not_the_url(
    page_at: Any, live_server: Any, demo: None
) -> None:
    sign_in(page_at, live_server.url, "alice")
    with page_at.expect_request(lambda r: "/requests/new/estimate/" in r.url) as seen:
        page_at.goto(f"{live_server.url}/requests/new/")
    request = seen.value
    assert "csrfmiddlewaretoken" not in request.url
    assert request.headers.get("x-csrftoken")


def test_an_empty_chart_says_no_data_yet(page_at: Any, live_server: Any, org: Any) -> None:
    page_at.goto(f"{live_server.url}/login/")
    page_at.fill("input[name=username]", org.dev_a.username)
    page_at.fill("input[name=password]", "pw-" + org.dev_a.username)
    page_at.click("form button[type=submit]")
    page_at.wait_for_selector("[data-testid=chart-empty]")
    assert page_at.locator("[data-testid=chart-empty]").first.inner_text() == "No data yet"
    label = page_at.locator("canvas[data-chart]").first.get_attribute("aria-label")
    assert label is not None
    assert label.endswith("no data yet")


def test_the_not_found_page_passes_axe_and_fits_a_phone(
    page_at: Any, live_server: Any, demo: None
) -> None:
    sign_in(page_at, live_server.url, "alice")
    response = page_at.goto(f"{live_server.url}/no-such-page/")
    assert response is not None
    assert response.status == 404
    walk = Walk("developer")
    for width_name in WIDTHS:
        check_page(page_at, walk, "/no-such-page/", width_name)
    assert not walk.problems, "\n".join(walk.problems)


def test_pages_changed_in_place_still_pass_axe(page_at: Any, live_server: Any, demo: None) -> None:
    """What HTMX swaps in (a new token, the live estimate, the flavors of a kind, marking the
    inbox read) is checked as the page then stands, at both widths."""
    walk = Walk("journeys")
    base = live_server.url
    sign_in(page_at, base, "alice")

    page_at.goto(f"{base}/account/tokens/")
    page_at.fill("#token-name", "laptop notebook")
    page_at.click("#token-panel button[type=submit]")
    page_at.wait_for_selector("[data-testid=new-token]")
    for width_name in WIDTHS:
        check_page(page_at, walk, "/account/tokens/ (token created)", width_name)

    page_at.goto(f"{base}/requests/new/")
    page_at.wait_for_selector("#estimate :first-child")
    with page_at.expect_response(lambda r: "/requests/new/flavors/" in r.url):
        page_at.select_option("[data-testid=flavor-kind]", index=1)
    page_at.wait_for_timeout(300)  # let HTMX settle the swap
    for width_name in WIDTHS:
        check_page(page_at, walk, "/requests/new/ (kind chosen, estimate shown)", width_name)

    page_at.goto(f"{base}/notifications/")
    assert page_at.locator("[data-testid=unread-count]").count() == 1
    page_at.click("[data-testid=mark-all-read]")
    page_at.wait_for_selector("[data-testid=notification-list]")
    assert page_at.locator("[data-testid=unread-count]").count() == 0
    for width_name in WIDTHS:
        check_page(page_at, walk, "/notifications/ (all read)", width_name)

    assert not walk.problems, "\n".join(walk.problems)


def test_the_api_docs_pass_axe_and_fit_a_phone(page_at: Any, live_server: Any, org: Any) -> None:
    """The API documentation (Swagger UI), as it loads and with an operation opened: a page in
    English with landmarks, and colours readable by everyone, at both widths."""
    page_at.goto(f"{live_server.url}/login/")
    page_at.fill("input[name=username]", org.dev_a.username)
    page_at.fill("input[name=password]", "pw-" + org.dev_a.username)
    page_at.click("form button[type=submit]")
    page_at.wait_for_selector("[data-testid=home-heading]")

    response = page_at.goto(f"{live_server.url}/api/docs/")
    assert response is not None
    assert response.status == 200
    page_at.wait_for_selector(".swagger-ui .opblock-summary", timeout=30_000)
    assert page_at.evaluate("() => document.documentElement.lang") == "en"
    walk = Walk("api docs")
    for width_name in WIDTHS:
        check_page(page_at, walk, "/api/docs/", width_name)

    page_at.set_viewport_size({"width": WIDTHS["desktop"], "height": 900})
    for method in ("get", "post", "patch", "delete"):
        page_at.locator(f".swagger-ui .opblock-summary-{method}").first.click()
    page_at.wait_for_selector(".swagger-ui .opblock-body .responses-table")
    for width_name in WIDTHS:
        check_page(page_at, walk, "/api/docs/ (operations opened)", width_name)

    page_at.set_viewport_size({"width": WIDTHS["desktop"], "height": 900})
    page_at.locator(".swagger-ui .opblock-post .try-out__btn").first.click()
    page_at.wait_for_selector(".swagger-ui .btn.execute")
    for width_name in WIDTHS:
        check_page(page_at, walk, "/api/docs/ (trying a POST out)", width_name)

    page_at.set_viewport_size({"width": WIDTHS["desktop"], "height": 900})
    page_at.locator(".swagger-ui .btn.authorize").first.click()
    page_at.wait_for_selector(".swagger-ui .modal-ux .close-modal[aria-label=Close]")
    for width_name in WIDTHS:
        check_page(page_at, walk, "/api/docs/ (the Authorize dialog)", width_name)

    assert not walk.problems, "\n".join(walk.problems)
