"""The requests page says what it lists and narrows a long list by owner, project, name,
state and date; a filter never reaches another team's requests."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

from scheduling.models import GpuRequest
from tenants.choices import Role
from tenants.models import Membership
from tests.support.factories import GpuRequestFactory
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db


def login(username: str) -> Client:
    client = Client()
    assert client.login(username=username, password=f"pw-{username}")
    return client


def listed(client: Client, **query: str) -> set[int]:
    """The request numbers the page lists for this query."""
    page = client.get(reverse("gpu-requests-page"), query)
    assert page.status_code == 200
    return {int(n) for n in re.findall(r'href="/requests/(\d+)/"', page.content.decode())}


def title(client: Client) -> str:
    page = client.get(reverse("gpu-requests-page")).content.decode()
    found = re.search(r'data-testid="list-title">([^<]+)<', page)
    assert found is not None
    return found.group(1)


def test_each_role_sees_a_title_that_says_what_is_listed(org: Org) -> None:
    assert title(login("dev_a")) == "My requests"
    assert title(login("lead_a")) == f"Team {org.team_a.name}&#x27;s requests"
    assert title(login("admin")) == "All requests"


def test_a_lead_narrows_the_team_list_by_owner_name_state_and_date(org: Org) -> None:
    sweep = GpuRequestFactory.create(project=org.project_a, actor=org.dev_a, name="sweep 1")
    notebook = GpuRequestFactory.create(project=org.project_a, actor=org.lead_a, name="notebook")
    theirs = GpuRequestFactory.create(project=org.project_b, actor=org.dev_b, name="sweep 9")
    lead = login("lead_a")
    assert listed(lead) == {sweep.pk, notebook.pk}
    assert listed(lead, owner="dev_a") == {sweep.pk}
    assert listed(lead, q="sweep") == {sweep.pk}
    assert listed(lead, q=f"#{notebook.pk}") == {notebook.pk}
    assert listed(lead, q=str(theirs.pk)) == set()
    assert listed(lead, project=str(org.project_a.pk)) == {sweep.pk, notebook.pk}
    GpuRequest.objects.filter(pk=sweep.pk).update(created_at="2026-01-10T12:00:00Z")
    assert listed(lead, created_after="2026-01-01", created_before="2026-01-31") == {sweep.pk}
    assert listed(lead, status=notebook.status, owner="lead_a") == {notebook.pk}


def test_a_filter_naming_another_team_is_a_form_error_not_a_leak(org: Org) -> None:
    theirs = GpuRequestFactory.create(project=org.project_b, actor=org.dev_b, name="canary")
    lead = login("lead_a")
    page = lead.get(reverse("gpu-requests-page"), {"owner": "dev_b"}).content.decode()
    assert 'data-testid="error-owner"' in page and "canary" not in page
    page = lead.get(reverse("gpu-requests-page"), {"project": org.project_b.pk}).content.decode()
    assert 'data-testid="error-project"' in page and "canary" not in page
    assert theirs.pk not in listed(lead, q="canary")


def test_a_developer_has_no_owner_filter_and_bad_dates_are_form_errors(org: Org) -> None:
    GpuRequestFactory.create(project=org.project_a, actor=org.dev_a)
    page = login("dev_a").get(reverse("gpu-requests-page"), {"created_after": "yesterday"})
    body = page.content.decode()
    assert page.status_code == 200
    assert 'name="owner"' not in body
    assert 'data-testid="error-created"' in body


def test_a_lead_of_two_teams_sees_both_named_in_the_title(org: Org) -> None:
    Membership.objects.create(user=org.lead_a, team=org.team_b, role=Role.TEAM_LEAD)
    assert title(login("lead_a")) == f"Requests of the teams {org.team_a.name}, {org.team_b.name}"


def api_listed(user: object, **query: str) -> set[int]:
    response = api_client(user).get(reverse("gpu-request-list"), query)  # type: ignore[arg-type]
    assert response.status_code == 200, response.content
    return {row["id"] for row in response.json()["results"]}


def test_the_api_searches_and_filters_by_date_like_the_page(org: Org) -> None:
    sweep = GpuRequestFactory.create(project=org.project_a, actor=org.dev_a, name="sweep 1")
    notebook = GpuRequestFactory.create(project=org.project_a, actor=org.lead_a, name="notebook")
    GpuRequest.objects.filter(pk=sweep.pk).update(created_at="2026-01-10T12:00:00Z")
    assert api_listed(org.lead_a, search="sweep") == {sweep.pk}
    assert api_listed(org.lead_a, search=f"#{notebook.pk}") == {notebook.pk}
    assert api_listed(org.lead_a, created_after="2026-01-01", created_before="2026-01-31") == {
        sweep.pk
    }
    assert api_listed(org.lead_a, owner="lead_a", search="note") == {notebook.pk}


def test_the_api_search_never_reaches_another_teams_requests(org: Org) -> None:
    theirs = GpuRequestFactory.create(project=org.project_b, actor=org.dev_b, name="canary")
    assert api_listed(org.lead_a, search="canary") == set()
    assert api_listed(org.lead_a, search=str(theirs.pk)) == set()
    assert api_listed(org.dev_a, owner="dev_b") == set()
    assert api_listed(org.lead_b, search="canary") == {theirs.pk}


def test_a_bad_date_in_the_api_filter_is_a_400_naming_the_field(org: Org) -> None:
    response = api_client(org.lead_a).get(
        reverse("gpu-request-list"), {"created_after": "yesterday"}
    )
    assert response.status_code == 400
    assert "created_after" in response.json()["error"]["fields"]
