from __future__ import annotations

import pytest
from django.urls import reverse

from tenants.models import AuditEvent, Project, Team
from tests.support.api_contract import ApiContract, World
from tests.support.cross_tenant import result_ids
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db


def a_team_without_projects(world: World) -> Team:
    Project.objects.filter(team=world.org.team_a).delete()
    return world.org.team_a


TEAMS = ApiContract(
    basename="team",
    subject=a_team_without_projects,
    audit="team",
    may_read={"admin", "finance", "lead_a", "dev_a"},
    may_create={"admin"},
    may_update={"admin"},
    may_delete={"admin"},
    create_body={"name": "Robotics", "slug": "robotics"},
    update_body={"name": "Renamed"},
    list_filters=lambda world: [{"slug": "team-a"}],
)
test_teams_api_contract = TEAMS.tests()


def test_members_list_only_their_own_teams(org: Org) -> None:
    response = api_client(org.dev_a).get(reverse("team-list"))
    assert response.status_code == 200
    assert result_ids(response) == {org.team_a.pk}
    assert response.json()["count"] == 1


def test_admin_and_finance_list_every_team(org: Org) -> None:
    for user in (org.admin, org.finance):
        assert result_ids(api_client(user).get(reverse("team-list"))) == {
            org.team_a.pk,
            org.team_b.pk,
        }


def test_user_without_role_sees_no_team(org: Org) -> None:
    assert result_ids(api_client(org.nobody).get(reverse("team-list"))) == set()


def test_admin_creates_team_and_it_is_audited(org: Org) -> None:
    response = api_client(org.admin).post(
        reverse("team-list"), {"name": "Robotics", "slug": "robotics"}, format="json"
    )
    assert response.status_code == 201, response.content
    team = Team.objects.get(slug="robotics")
    assert response.json()["id"] == team.pk
    assert AuditEvent.objects.filter(action="team.created", target_id=str(team.pk)).exists()


def test_team_with_bad_slug_and_duplicate_name_is_400_naming_fields(org: Org) -> None:
    response = api_client(org.admin).post(
        reverse("team-list"), {"name": "Team A", "slug": "not a slug!"}, format="json"
    )
    assert response.status_code == 400
    assert set(response.json()["error"]["fields"]) == {"name", "slug"}


def test_team_with_projects_cannot_be_deleted(org: Org) -> None:
    response = api_client(org.admin).delete(reverse("team-detail", kwargs={"pk": org.team_a.pk}))
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "team_has_projects"
