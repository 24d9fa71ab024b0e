"""Refusals in plain words: a blank name, a page a role has no use for, a field at fault."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import URLResolver, get_resolver, reverse

from scheduling.models import GpuRequest, Node, NodePool, Tier
from scheduling.services.requests import GpuRequestSpec, submit_gpu_request
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


def _admin_urls() -> list[str]:
    """Every page only platform admins (or staff) use, with the ids of objects that exist."""
    urls = [
        reverse(name)
        for name in (
            "audit-page",
            "fleet-page",
            "policy-replay-page",
            "approvals-page",
            "budgets-page",
            "statements-page",
            "sharing-report-page",
            "manage",
            "manage-mig-plan",
        )
    ]
    for pattern in get_resolver().url_patterns:
        if isinstance(pattern, URLResolver) and str(pattern.pattern) == "manage/":
            for route in pattern.url_patterns:
                name = getattr(route, "name", None)
                if name and "<int:pk>" not in str(route.pattern):
                    urls.append(reverse(name))
    pool = NodePool.objects.order_by("pk")[0]
    tier = Tier.objects.order_by("pk")[0]
    node = Node.objects.order_by("pk")[0]
    urls += [
        reverse("manage-pools-edit", args=[pool.pk]),
        reverse("manage-tiers-delete", args=[tier.pk]),
        reverse("fleet-node-page", args=[node.pk]),
        reverse("fleet-pool-page", args=[pool.slug]),
        "/admin/",
        "/admin/login/",
        "/admin/scheduling/",
        "/admin/auth/user/",
        f"/admin/scheduling/nodepool/{pool.pk}/change/",
        "/admin/scheduling/nodepool/add/",
    ]
    return urls


def test_every_admin_page_refused_to_a_developer_is_the_portals_404(org: Org, fleet: Fleet) -> None:
    client = _client(org.dev_a)
    urls = _admin_urls()
    assert len(urls) > 20
    for url in urls:
        for response in (client.get(url), client.post(url, {})):
            assert response.status_code == 404, (url, response.status_code)
            html = response.content.decode()
            assert "Back to the portal" in html and "Not found" in html, url


def test_a_visitor_is_sent_to_sign_in_at_the_django_admin() -> None:
    response = Client().get("/admin/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_staff_still_read_the_django_admin(org: Org) -> None:
    org.admin.is_staff = True
    org.admin.save(update_fields=["is_staff"])
    assert _client(org.admin).get("/admin/").status_code == 200


def test_creating_a_budget_is_the_portals_404_to_a_developer_and_403_to_finance(
    org: Org,
) -> None:
    """The budgets page does not exist for a developer, so neither does its form's action;
    finance reads budgets but may not write them, and the portal's page says why."""
    response = _client(org.dev_a).post(reverse("budget-create"), {})
    assert response.status_code == 404
    assert "Not found" in response.content.decode()
    response = _client(org.finance).post(reverse("budget-create"), {})
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
