"""The requests page says what it lists and narrows a long list by owner, project, name,
state and date; a filter never reaches another team's requests."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

from scheduling.models import GpuRequest
from tests.support.factories import GpuRequestFactory
from tests.support.personas import Org

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
    assert title(login("lead_a")) == f"Requests of {org.team_a.name}"
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
