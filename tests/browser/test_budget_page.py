"""A team lead creates a budget in the browser: the form posts by HTMX and the list shows it."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from accounting.models import Budget
from tests.browser.test_dashboards import sign_in
from tests.support.personas import Org, make_org

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def browser_org(transactional_db: None) -> Org:
    return make_org()


def test_lead_creates_a_budget_through_the_form_and_sees_it_listed(
    browser: Any, live_server: Any, browser_org: Org
) -> None:
    page = sign_in(browser, live_server, browser_org.lead_a)
    try:
        page.click("nav >> text=Budgets")
        page.wait_for_selector("[data-testid=budgets-empty]")
        page.select_option("select[name=project]", label="Team A / A two")
        page.select_option("select[name=unit]", "gpu_hours")
        page.fill("input[name=amount]", "250")
        page.select_option("select[name=over_budget_policy]", "approval")
        page.click("[data-testid=budget-form] button[type=submit]")
        row = page.wait_for_selector("[data-testid=budget-row]", timeout=15_000)
        assert row is not None
        text = row.inner_text()
        assert "Team A / A two" in text and "250.00" in text and "GPU-hours" in text
        assert "New work needs lead approval" in text and "0.0 %" in text
        # Swapped in by HTMX: the notice is in the body, the page was not reloaded.
        assert page.inner_text("[data-testid=budget-notice]").startswith("Budget of")
        assert not page.js_errors
        created = Budget.objects.get()
        assert (created.project, created.amount) == (browser_org.project_a2, Decimal("250"))
    finally:
        page.close()
