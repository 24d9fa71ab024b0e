"""Refusals in plain words: a blank name, a page a role has no use for, a field at fault."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from scheduling.models import GpuRequest
from scheduling.services import submit_gpu_request
from scheduling.services.requests import GpuRequestSpec
from tenants.errors import DomainError
from tests.scheduling.conftest import Fleet
from tests.scheduling.test_pages import form_data
from tests.support.personas import Org

pytestmark = pytest.mark.django_db


def _client(user: object) -> Client:
    client = Client()
    client.force_login(user)  # type: ignore[arg-type]
    return client


@pytest.mark.parametrize("name", ["", "   "])
def test_the_form_refuses_a_blank_name_on_the_field(org: Org, fleet: Fleet, name: str) -> None:
    response = _client(org.dev_a).post(reverse("gpu-request-new"), form_data(org, fleet, name=name))
    assert response.status_code == 200
    html = response.content.decode()
    field = html.split('name="name"')[1].split("</div>")[0]
    assert "name cannot be blank" in field, field
    assert not GpuRequest.objects.exists()


def test_the_service_refuses_a_name_of_spaces(org: Org, fleet: Fleet) -> None:
    with pytest.raises(DomainError) as refused:
        submit_gpu_request(
            actor=org.dev_a,
            spec=GpuRequestSpec(
                project=org.project_a,
                flavor=fleet.l4_12g,
                gpu_count=1,
                image="registry.example.com/ml/pytorch:2.4",
                max_runtime_seconds=3600,
                name="  \t ",
            ),
        )
    assert list(refused.value.fields) == ["name"]
    assert not GpuRequest.objects.exists()


@pytest.mark.parametrize(
    "route", ["manage", "manage-pools", "policy-replay-page", "fleet-page", "audit-page"]
)
def test_a_page_a_developer_has_no_use_for_is_the_portals_404(org: Org, route: str) -> None:
    response = _client(org.dev_a).get(reverse(route))
    assert response.status_code == 404
    html = response.content.decode()
    assert "Back to the portal" in html and "Not found" in html


def test_a_refused_action_on_a_page_is_the_portals_403(org: Org) -> None:
    """A developer may see the budgets page but not create one: the portal's page says why."""
    response = _client(org.dev_a).post(reverse("budget-create"), {})
    assert response.status_code == 403
    html = response.content.decode()
    assert "Back to the portal" in html and "Only team leads and platform admins" in html


def test_another_teams_report_names_the_field_and_why(org: Org) -> None:
    page = _client(org.lead_a).get(reverse("reports-page"), {"team": org.team_b.pk})
    assert page.status_code == 400
    assert "team: No such team." in page.content.decode()
    api = _client(org.lead_a).get(reverse("usage"), {"team": org.team_b.pk})
    assert api.status_code == 400
    assert api.json()["error"]["message"] == "team: No such team."
