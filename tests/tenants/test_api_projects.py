from __future__ import annotations

import pytest
from django.urls import reverse

from tenants.models import Project
from tests.support.api_contract import ApiContract
from tests.support.cross_tenant import result_ids
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db

PROJECTS = ApiContract(
    basename="project",
    subject=lambda world: world.org.project_a2,
    audit="project",
    may_read={"admin", "finance", "lead_a", "dev_a"},
    may_create={"admin", "lead_a"},
    may_update={"admin", "lead_a"},
    may_delete={"admin", "lead_a"},
    create_body=lambda world: {"team": world.org.team_a.pk, "name": "New", "slug": "new"},
    update_body={"name": "Renamed"},
    list_filters=lambda world: [{"team": world.org.team_a.pk}, {"slug": "a-two"}],
)
test_projects_api_contract = PROJECTS.tests()


def test_developer_lists_own_team_projects(org: Org) -> None:
    response = api_client(org.dev_a).get(reverse("project-list"))
    assert result_ids(response) == {org.project_a.pk, org.project_a2.pk}
    row = next(r for r in response.json()["results"] if r["id"] == org.project_a.pk)
    assert row["namespace"] == "gpu-team-a-a-one"


def test_lead_creates_project_in_own_team(org: Org) -> None:
    response = api_client(org.lead_a).post(
        reverse("project-list"),
        {"team": org.team_a.pk, "name": "New", "slug": "new"},
        format="json",
    )
    assert response.status_code == 201, response.content
    assert Project.objects.filter(team=org.team_a, slug="new").exists()


def test_lead_cannot_create_project_in_other_team(org: Org) -> None:
    response = api_client(org.lead_a).post(
        reverse("project-list"), {"team": org.team_b.pk, "name": "X", "slug": "x"}, format="json"
    )
    # Team B does not exist for lead A, so the reference is invalid rather than forbidden.
    assert response.status_code == 400
    assert "team" in response.json()["error"]["fields"]
    assert not Project.objects.filter(slug="x").exists()


def test_duplicate_project_slug_in_team_is_400(org: Org) -> None:
    response = api_client(org.lead_a).post(
        reverse("project-list"),
        {"team": org.team_a.pk, "name": "Dup", "slug": "a-one"},
        format="json",
    )
    assert response.status_code == 400
    assert "slug" in response.json()["error"]["fields"]


def test_project_cannot_move_to_another_team(org: Org) -> None:
    response = api_client(org.admin).patch(
        reverse("project-detail", kwargs={"pk": org.project_a.pk}),
        {"team": org.team_b.pk},
        format="json",
    )
    assert response.status_code == 400
    org.project_a.refresh_from_db()
    assert org.project_a.team == org.team_a


def test_lead_renames_and_deletes_project(org: Org) -> None:
    client = api_client(org.lead_a)
    url = reverse("project-detail", kwargs={"pk": org.project_a2.pk})
    assert client.patch(url, {"name": "Renamed"}, format="json").json()["name"] == "Renamed"
    assert client.delete(url).status_code == 204
    assert not Project.objects.filter(pk=org.project_a2.pk).exists()
