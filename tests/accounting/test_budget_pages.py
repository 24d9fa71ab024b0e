"""The budgets page: leads and admins manage budgets in the browser, finance reads, others cannot.

The `usage` fixture: team A spent 5.50 (2.5 GPU-hours; 0.5 of them in project A two) this month.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from accounting.models import Budget
from tenants.models import AuditEvent
from tests.accounting.test_api import usage
from tests.support.cross_tenant import covers
from tests.support.personas import Org

__all__ = ["usage"]

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}


def login(user: Any, *, enforce_csrf_checks: bool = False) -> Client:
    client = Client(enforce_csrf_checks=enforce_csrf_checks)
    assert client.login(username=user.username, password=f"pw-{user.username}")
    return client


def budget(org: Org, **fields: Any) -> Budget:
    values: dict[str, Any] = {"team": org.team_a, "unit": "money", "amount": Decimal("10")}
    values.update(fields)
    return Budget.objects.create(**values)


def row_of(html: str, item: Budget) -> str:
    found = re.search(rf'<tr id="budget-{item.pk}".*?</tr>', html, re.DOTALL)
    assert found, f"budget {item.pk} is not on the page"
    return found.group(0)


def form_body(org: Org, **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "team": org.team_a.pk,
        "project": "",
        "unit": "money",
        "amount": "250",
        "over_budget_policy": "preemptible_only",
    }
    body.update(overrides)
    return body


# Reading ---------------------------------------------------------------------------------------


def test_lead_sees_each_budget_with_its_burn_and_a_bar_coloured_by_use(
    org: Org, usage: Any
) -> None:
    calm = budget(org, amount=Decimal("10"))  # 5.50 of 10 money: 55 %
    near = budget(org, project=org.project_a2, unit="gpu_hours", amount=Decimal("0.6"))
    over = budget(org, unit="gpu_hours", amount=Decimal("2"), over_budget_policy="approval")
    hidden = budget(org, team=org.team_b)
    page = login(org.lead_a).get(reverse("budgets-page"))
    assert page.status_code == 200
    html = page.content.decode()
    calm_row, near_row, over_row = (row_of(html, b) for b in (calm, near, over))
    assert "5.50" in calm_row and "55.0 %" in calm_row and "bg-success" in calm_row
    assert "EUR" in calm_row and "Team A" in calm_row and "whole team" in calm_row
    assert "A one" not in near_row and "A two" in near_row and "GPU-hours" in near_row
    assert "83.3 %" in near_row and "bg-warning" in near_row
    assert "125.0 %" in over_row and "bg-danger" in over_row and "width:100%" in over_row
    assert "New work needs lead approval" in over_row
    assert f'id="budget-{hidden.pk}"' not in html and "Team B" not in html
    assert 'data-testid="budget-form"' in html and "Delete" in calm_row


def test_the_page_reads_in_the_same_number_of_queries_for_one_budget_or_six(
    org: Org, usage: Any
) -> None:
    def queries() -> int:
        client = login(org.lead_a)
        with CaptureQueriesContext(connection) as captured:
            assert client.get(reverse("budgets-page")).status_code == 200
        return len(captured)

    budget(org)
    one = queries()
    assert one > 0, "the capture saw no queries: it measures nothing"
    budget(org, unit="gpu_hours")
    for project in (org.project_a, org.project_a2):
        for unit in ("money", "gpu_hours"):
            budget(org, project=project, unit=unit)
    assert Budget.objects.count() == 6
    assert queries() == one


def test_finance_reads_every_team_but_gets_no_form_or_buttons(org: Org, usage: Any) -> None:
    mine, theirs = budget(org), budget(org, team=org.team_b)
    html = login(org.finance).get(reverse("budgets-page")).content.decode()
    assert f'id="budget-{mine.pk}"' in html and f'id="budget-{theirs.pk}"' in html
    assert 'data-testid="budget-form"' not in html
    assert reverse("budget-edit", args=[mine.pk]) not in html
    assert reverse("budget-delete", args=[theirs.pk]) not in html


def test_the_page_is_in_the_navigation_of_leads_admins_and_finance_only(org: Org) -> None:
    link = f'href="{reverse("budgets-page")}"'
    for user in (org.lead_a, org.admin, org.finance):
        assert link in login(user).get(reverse("home")).content.decode(), user.username
    assert link not in login(org.dev_a).get(reverse("home")).content.decode()


def test_developers_and_people_without_a_role_have_no_budgets_page(org: Org) -> None:
    budget(org, project=org.project_a)
    assert login(org.dev_a).get(reverse("budgets-page")).status_code == 404
    assert login(org.nobody).get(reverse("budgets-page")).status_code == 404
    assert Client().get(reverse("budgets-page")).status_code == 302  # to the login page


def test_a_lead_of_one_team_finds_it_chosen_an_admin_chooses(org: Org) -> None:
    def team_select(user: Any) -> str:
        html = login(user).get(reverse("budgets-page")).content.decode()
        found = re.search(r'<select name="team".*?</select>', html, re.DOTALL)
        assert found, "no team field"
        return found.group(0)

    lead_choices = team_select(org.lead_a)
    assert "Team A" in lead_choices and "Team B" not in lead_choices
    assert 'value=""' not in lead_choices
    admin_choices = team_select(org.admin)
    assert 'value=""' in admin_choices and "Team B" in admin_choices


# Writing ---------------------------------------------------------------------------------------


def test_lead_creates_a_budget_through_the_form(org: Org) -> None:
    response = login(org.lead_a).post(reverse("budget-create"), form_body(org), follow=True)
    assert response.status_code == 200
    created = Budget.objects.get(team=org.team_a)
    assert (created.project, created.unit, created.amount, created.over_budget_policy) == (
        None,
        "money",
        Decimal("250"),
        "preemptible_only",
    )
    html = response.content.decode()
    assert "Budget of Team A created." in html and "250.00" in row_of(html, created)
    event = AuditEvent.objects.get(action="budget.created")
    assert (event.actor, event.team) == (org.lead_a, org.team_a)


def test_htmx_create_swaps_in_the_list_with_the_new_project_budget(org: Org) -> None:
    body = form_body(org, project=org.project_a2.pk, unit="gpu_hours", amount="12.5")
    response = login(org.lead_a).post(reverse("budget-create"), body, headers=HTMX)
    assert response.status_code == 200
    html = response.content.decode()
    assert "<html" not in html, "HTMX gets the page body, not the whole page"
    created = Budget.objects.get(project=org.project_a2, unit="gpu_hours")
    assert "12.50" in row_of(html, created) and "budget-notice" in html


def test_admin_creates_a_budget_for_any_team(org: Org) -> None:
    response = login(org.admin).post(reverse("budget-create"), form_body(org, team=org.team_b.pk))
    assert response.status_code == 302
    assert Budget.objects.filter(team=org.team_b, unit="money").exists()


def test_lead_opens_the_edit_row_and_changes_amount_and_policy(org: Org, usage: Any) -> None:
    item = budget(org)
    client = login(org.lead_a)
    url = reverse("budget-edit", args=[item.pk])
    edit_row = client.get(url, headers=HTMX).content.decode()
    assert 'data-testid="budget-edit-row"' in edit_row and 'value="10.00"' in edit_row
    response = client.post(url, {"amount": "4", "over_budget_policy": "approval"}, headers=HTMX)
    assert response.status_code == 200
    row = response.content.decode()
    assert "<html" not in row and 'data-testid="budget-row"' in row
    assert "4.00" in row and "137.5 %" in row and "bg-danger" in row
    item.refresh_from_db()
    assert (item.amount, item.over_budget_policy) == (Decimal("4"), "approval")
    assert AuditEvent.objects.filter(action="budget.updated", team=org.team_a).exists()


def test_edit_without_htmx_shows_the_form_in_the_page_and_redirects_after_saving(
    org: Org,
) -> None:
    item = budget(org)
    client = login(org.lead_a)
    url = reverse("budget-edit", args=[item.pk])
    page = client.get(url).content.decode()
    assert "<html" in page and 'data-testid="budget-edit-row"' in page
    assert client.post(url, {"amount": "7", "over_budget_policy": "notify"}).status_code == 302
    item.refresh_from_db()
    assert item.amount == Decimal("7")


def test_lead_deletes_a_budget_and_the_row_goes(org: Org) -> None:
    item = budget(org, project=org.project_a)
    response = login(org.lead_a).post(reverse("budget-delete", args=[item.pk]), headers=HTMX)
    assert (response.status_code, response.content) == (200, b"")
    assert not Budget.objects.filter(pk=item.pk).exists()
    event = AuditEvent.objects.get(action="budget.deleted")
    assert (event.actor, event.team, event.project) == (org.lead_a, org.team_a, org.project_a)


def test_deleting_twice_is_404_the_second_time(org: Org) -> None:
    item = budget(org)
    client = login(org.lead_a)
    assert client.post(reverse("budget-delete", args=[item.pk])).status_code == 302
    assert client.post(reverse("budget-delete", args=[item.pk])).status_code == 404


def test_edit_and_delete_refuse_get_or_put_where_they_only_take_post(org: Org) -> None:
    item = budget(org)
    client = login(org.lead_a)
    assert client.get(reverse("budget-delete", args=[item.pk])).status_code == 405
    assert client.get(reverse("budget-create")).status_code == 405
    assert client.put(reverse("budget-edit", args=[item.pk])).status_code == 405
    assert Budget.objects.filter(pk=item.pk).exists()


# Bad input -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"amount": "-1"}, "greater than or equal to 0.01"),
        ({"amount": "0"}, "greater than or equal to 0.01"),
        ({"amount": "abc"}, "Enter a number."),
        ({"amount": "NaN"}, "Enter a number."),
        ({"amount": "1.005"}, "no more than 2 decimal places"),
        ({"amount": "1" * 15}, "no more than 14 digits"),
        ({"amount": ""}, "This field is required."),
        ({"unit": "yen"}, "Select a valid choice."),
        ({"over_budget_policy": "panic"}, "Select a valid choice."),
        ({"team": "999999999999"}, "Select a valid choice."),
        ({"team": "abc"}, "Select a valid choice."),
    ],
)
def test_bad_input_is_a_form_error_and_writes_nothing(
    org: Org, overrides: dict[str, Any], message: str
) -> None:
    client = login(org.lead_a)
    response = client.post(reverse("budget-create"), form_body(org, **overrides))
    assert response.status_code == 400
    html = response.content.decode()
    assert message in html and 'data-testid="field-error"' in html
    assert not Budget.objects.exists()
    fragment = client.post(reverse("budget-create"), form_body(org, **overrides), headers=HTMX)
    assert fragment.status_code == 200, "HTMX swaps 2xx only: errors come back as 200"
    assert message in fragment.content.decode() and "<html" not in fragment.content.decode()
    assert not Budget.objects.exists()


def test_another_teams_team_or_project_cannot_be_chosen_by_a_lead(org: Org) -> None:
    client = login(org.lead_a)
    for overrides in ({"team": org.team_b.pk}, {"project": org.project_b.pk}):
        response = client.post(reverse("budget-create"), form_body(org, **overrides))
        assert response.status_code == 400
        assert "Select a valid choice." in response.content.decode()
    assert not Budget.objects.exists()


def test_a_project_of_another_team_than_the_chosen_one_is_refused_by_the_service(
    org: Org,
) -> None:
    body = form_body(org, team=org.team_a.pk, project=org.project_b.pk)
    response = login(org.admin).post(reverse("budget-create"), body)
    assert response.status_code == 400
    assert "The project belongs to another team." in response.content.decode()
    assert not Budget.objects.exists()
    assert not AuditEvent.objects.filter(action="budget.created").exists()


def test_a_second_budget_in_the_same_unit_is_a_form_error(org: Org) -> None:
    budget(org, amount=Decimal("10"))
    response = login(org.lead_a).post(reverse("budget-create"), form_body(org, amount="99"))
    assert response.status_code == 400
    assert "There is already a budget in this unit for it." in response.content.decode()
    assert list(Budget.objects.values_list("amount", flat=True)) == [Decimal("10")]


@pytest.mark.parametrize("amount", ["-5", "0", "abc", ""])
def test_bad_amount_on_edit_keeps_the_budget_as_it_was(org: Org, amount: str) -> None:
    item = budget(org)
    url = reverse("budget-edit", args=[item.pk])
    client = login(org.lead_a)
    body = {"amount": amount, "over_budget_policy": "approval"}
    response = client.post(url, body, headers=HTMX)
    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-testid="budget-edit-row"' in html and 'data-testid="field-error"' in html
    assert client.post(url, body).status_code == 400
    item.refresh_from_db()
    assert (item.amount, item.over_budget_policy) == (Decimal("10"), "notify")
    assert not AuditEvent.objects.filter(action="budget.updated").exists()


# Roles and tenants -----------------------------------------------------------------------------


def test_developer_and_finance_cannot_create_edit_or_delete(org: Org) -> None:
    """Finance reads budgets and is refused (403) a write; a developer has no budgets page,
    so its actions do not exist for them either (404), even on a budget of their project."""
    item = budget(org, project=org.project_a)
    change = {"amount": "1", "over_budget_policy": "notify"}
    for user, status in ((org.dev_a, 404), (org.finance, 403)):
        client = login(user)
        assert client.post(reverse("budget-create"), form_body(org)).status_code == status
        url = reverse("budget-edit", args=[item.pk])
        assert client.get(url).status_code == status
        assert client.post(url, change, headers=HTMX).status_code == status
        assert client.post(reverse("budget-delete", args=[item.pk])).status_code == status
    item.refresh_from_db()
    assert item.amount == Decimal("10") and Budget.objects.count() == 1
    assert not AuditEvent.objects.filter(action__startswith="budget.").exists()


@covers("budget-edit", "budget-delete")
def test_another_teams_budget_is_404_to_edit_or_delete(org: Org) -> None:
    theirs = budget(org, team=org.team_b, project=org.project_b)
    change = {"amount": "1", "over_budget_policy": "approval"}
    for user in (org.lead_a, org.dev_a):
        client = login(user)
        edit = reverse("budget-edit", args=[theirs.pk])
        assert client.get(edit).status_code == 404
        assert client.post(edit, change).status_code == 404
        assert client.post(edit, change, headers=HTMX).status_code == 404
        assert client.post(reverse("budget-delete", args=[theirs.pk])).status_code == 404
    theirs.refresh_from_db()
    assert (theirs.amount, theirs.over_budget_policy) == (Decimal("10"), "notify")


def test_writes_need_the_csrf_token(org: Org) -> None:
    item = budget(org)
    client = login(org.lead_a, enforce_csrf_checks=True)
    body = form_body(org, unit="gpu_hours")
    assert client.post(reverse("budget-create"), body).status_code == 403
    edit = reverse("budget-edit", args=[item.pk])
    assert client.post(edit, {"amount": "1", "over_budget_policy": "notify"}).status_code == 403
    assert client.post(reverse("budget-delete", args=[item.pk])).status_code == 403
    assert Budget.objects.count() == 1 and Budget.objects.get().amount == Decimal("10")
    # The same request with the token the page hands out goes through.
    client.get(reverse("budgets-page"))
    token = client.cookies["csrftoken"].value
    response = client.post(reverse("budget-create"), {**body, "csrfmiddlewaretoken": token})
    assert response.status_code == 302
    assert Budget.objects.filter(unit="gpu_hours").exists()
