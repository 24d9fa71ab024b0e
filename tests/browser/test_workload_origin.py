"""A lead opens a member's running service in a real browser: it is served on its own host,
and the portal's session and CSRF cookies never reach it; another team's user is refused."""

from __future__ import annotations

from typing import Any, cast
from urllib.parse import urlsplit

import pytest

from runtime.services.workload_access import COOKIE_NAME
from scheduling.choices import RequestStatus
from scheduling.models import GpuRequest
from tests.support.factories import GpuRequestFactory
from tests.support.fleet import make_fleet
from tests.support.personas import Org, make_org

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def running_service(transactional_db: None, live_server: Any, settings: Any) -> GpuRequest:
    """Team A's developer's service, running; workloads at <id>.workloads.localhost:<port>."""
    port = urlsplit(live_server.url).port
    settings.WORKLOAD_DOMAIN = f"workloads.localhost:{port}"
    settings.WORKLOAD_SCHEME = "http"
    settings.PORTAL_URL = live_server.url
    org = make_org()
    fleet = make_fleet(org)
    service = cast(
        GpuRequest,
        GpuRequestFactory(
            project=org.project_a, flavor=fleet.l4_6g, kind="service", actor=org.dev_a
        ),
    )
    # (Here the submission's tasks run at once; its lifecycle is not what this test is about.)
    GpuRequest.objects.filter(pk=service.pk).update(status=RequestStatus.RUNNING)
    service.refresh_from_db()
    service.org = org  # type: ignore[attr-defined]
    return service


def signed_in(browser: Any, live_server: Any, username: str) -> tuple[Any, Any]:
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{live_server.url}/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", "pw-" + username)
    page.click("form button[type=submit], form input[type=submit]")
    page.wait_for_selector("[data-testid=home-heading]")
    return context, page


def test_a_lead_opens_a_members_service_and_it_never_sees_the_portals_cookies(
    browser: Any, live_server: Any, running_service: GpuRequest
) -> None:
    org: Org = running_service.org  # type: ignore[attr-defined]
    context, page = signed_in(browser, live_server, org.lead_a.username)
    try:
        portal_cookies = {c["name"] for c in context.cookies()}
        assert {"sessionid", "csrftoken"} <= portal_cookies  # the lead is signed in to the portal
        page.goto(f"{live_server.url}/requests/{running_service.pk}/")
        with context.expect_page() as opened:
            page.click("[data-testid=open-workload]")
        workload = opened.value
        workload.wait_for_selector("[data-testid=cookie-names]")
        origin = urlsplit(workload.url)
        assert origin.hostname == f"{running_service.pk}.workloads.localhost"
        assert origin.path == "/"  # the one-use link is gone from the address bar
        # What the service received: its own cookie, none of the portal's.
        received = workload.inner_text("[data-testid=cookie-names]").split(", ")
        assert received == [COOKIE_NAME]
        assert workload.inner_text("[data-testid=workload-user]") == org.lead_a.username
        headers = workload.inner_text("[data-testid=header-names]")
        assert "Cookie" in headers and "sessionid" not in headers and "csrftoken" not in headers
        (cookie,) = [c for c in context.cookies() if c["name"] == COOKIE_NAME]
        assert cookie["domain"] == origin.hostname and cookie["httpOnly"]
    finally:
        context.close()


def test_another_teams_user_is_refused_at_the_portal_and_on_the_workload_host(
    browser: Any, live_server: Any, running_service: GpuRequest
) -> None:
    org: Org = running_service.org  # type: ignore[attr-defined]
    context, page = signed_in(browser, live_server, org.dev_b.username)
    try:
        refused = page.goto(f"{live_server.url}/connect/{running_service.pk}/")
        assert refused is not None and refused.status == 404
        # Straight to the workload's host: sent to the portal, which refuses again.
        port = urlsplit(live_server.url).port
        direct = page.goto(f"http://{running_service.pk}.workloads.localhost:{port}/")
        assert direct is not None and direct.status == 404
        assert urlsplit(page.url).path == f"/connect/{running_service.pk}/"
        assert not [c for c in context.cookies() if c["name"] == COOKIE_NAME]
    finally:
        context.close()
