"""A developer's notebook servers on a phone: the profile picker fills the form, and the home
page's Keep alive and Stop my server fit at 390 px and work."""

from __future__ import annotations

from typing import Any

import pytest

from scheduling.choices import RequestStatus
from scheduling.models import GpuRequest, ReclaimPolicy, Tier
from scheduling.services.notebook_profiles import create_notebook_profile
from tests.browser.test_dashboards import sign_in
from tests.support.factories import GpuRequestFactory, catch_up
from tests.support.fleet import make_fleet
from tests.support.personas import Org, make_org

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PHONE = {"width": 390, "height": 844}
SCROLL_WIDTH = "() => document.documentElement.scrollWidth"
IMAGE = "quay.io/jupyter/pytorch-notebook:cuda12-python-3.11-2024-10-07"


@pytest.fixture
def servers_org(transactional_db: None) -> tuple[Org, GpuRequest]:
    org = make_org()
    fleet = make_fleet(org)
    ReclaimPolicy.objects.update(notebook_keep_alive_seconds=1800)
    create_notebook_profile(
        actor=org.admin,
        name="PyTorch on an L4 share",
        image=IMAGE,
        tiers=[Tier.objects.get(slug="dev")],
        flavor=fleet.l4_12g,
    )
    notebook = GpuRequestFactory.create(
        actor=org.dev_a,
        project=org.project_a,
        flavor=fleet.l4_12g,
        kind="notebook",
        image=IMAGE,
        name="explore-coco",
    )
    catch_up(notebook, "running")
    return org, notebook


def test_a_developer_keeps_alive_and_stops_a_server_on_a_phone(
    browser: Any, live_server: Any, servers_org: tuple[Org, GpuRequest]
) -> None:
    org, notebook = servers_org
    page = sign_in(browser, live_server, org.dev_a)
    try:
        page.set_viewport_size(PHONE)
        page.goto(f"{live_server.url}/")
        card = page.locator("[data-testid=server-card]")
        card.wait_for()
        box = card.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"]
        page.click("[data-testid=keep-alive]")
        page.wait_for_selector("text=Kept alive: not reclaimed for idling before")
        notebook.refresh_from_db()
        assert notebook.idle_exempt_until is not None

        page.click("[data-testid=stop-server] summary")
        confirm = page.locator("[data-testid=confirm-stop]")
        assert confirm.is_visible()
        box = confirm.bounding_box()
        assert box is not None and box["x"] + box["width"] <= PHONE["width"]
        confirm.click()
        page.wait_for_selector("text=explore-coco stopped.")
        notebook.refresh_from_db()
        assert notebook.status == RequestStatus.CANCELLED
        assert page.locator("[data-testid=server-card]").count() == 0
        assert not page.js_errors
    finally:
        page.close()


def test_picking_a_profile_fills_the_request_form_on_a_phone(
    browser: Any, live_server: Any, servers_org: tuple[Org, GpuRequest]
) -> None:
    org, _ = servers_org
    page = sign_in(browser, live_server, org.dev_a)
    try:
        page.set_viewport_size(PHONE)
        page.goto(f"{live_server.url}/requests/new/")
        page.wait_for_selector("[data-testid=profile-card]")
        assert page.evaluate(SCROLL_WIDTH) <= PHONE["width"]
        page.check("[data-testid=profile-card] input[type=radio]")  # submits by itself
        page.wait_for_url("**/requests/new/?profile=*")
        assert page.input_value("#id_image") == IMAGE
        assert page.input_value("#id_kind") == "notebook"
        assert page.evaluate(SCROLL_WIDTH) <= PHONE["width"]
        assert not page.js_errors
    finally:
        page.close()
