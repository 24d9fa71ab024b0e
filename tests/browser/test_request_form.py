"""The request form in the browser: vGPU fields show only for vGPU flavors, also after the
flavor list is swapped by HTMX, and the estimate warns when a lead will have to approve."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser.test_dashboards import sign_in
from tests.support.fleet import make_fleet
from tests.support.personas import Org, make_org

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def browser_org(transactional_db: None) -> Org:
    org = make_org()
    make_fleet(org)
    return org


def test_vgpu_fields_follow_the_flavor_and_the_estimate_warns(
    browser: Any, live_server: Any, browser_org: Org
) -> None:
    page = sign_in(browser, live_server, browser_org.dev_a)
    try:
        page.goto(f"{live_server.url}/requests/new/")
        memory = page.locator("[data-field=gpu_memory_mib]")
        page.select_option("#id_kind", "job")
        page.wait_for_load_state("networkidle")
        page.select_option(
            "#id_flavor",
            label=page.locator("#id_flavor option[data-kind=whole]").first.inner_text(),
        )
        page.wait_for_function(
            "() => document.getElementById('id_gpu_memory_mib').disabled", timeout=15_000
        )
        assert memory.is_hidden()
        # A whole A100 in the training tier: the estimate says a lead approves first.
        page.wait_for_selector("[data-testid=needs-approval]", timeout=15_000)
        page.select_option("#id_kind", "notebook")  # HTMX swaps the flavor options
        # Notebooks cannot run in the whole-card training pool: its flavors leave the list.
        page.wait_for_function(
            "() => !document.querySelector('#id_flavor option[data-kind=whole]')", timeout=15_000
        )
        page.select_option(
            "#id_flavor", label=page.locator("#id_flavor option[data-kind=vgpu]").first.inner_text()
        )
        page.wait_for_function(
            "() => !document.getElementById('id_gpu_memory_mib').disabled", timeout=15_000
        )
        assert memory.is_visible()
        page.wait_for_selector("[data-testid=auto-approved]", timeout=15_000)
        assert not page.js_errors
    finally:
        page.close()
