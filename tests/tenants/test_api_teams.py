from __future__ import annotations

import pytest
from django.urls import reverse

from tenants.models import AuditEvent, Team
from tests.support.cross_tenant import assert_other_tenant_hidden, covers, result_ids
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db


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


@covers("team-detail")
def test_other_teams_are_404_to_members(org: Org) -> None:
    assert_other_tenant_hidden(
        api_client(org.lead_a),
        detail_route="team-detail",
        pk=org.team_b.pk,
        list_route="team-list",
        write_payload={"name": "stolen"},
        list_filters=[{"slug": "team-b"}],
    )
    org.team_b.refresh_from_db()
    assert org.team_b.name == "Team B"


def test_admin_creates_team_and_it_is_audited(org: Org) -> None:
    response = api_client(org.admin).post(
        reverse("team-list"), {"name": "Robotics", "slug": "robotics"}, format="json"
    )
    assert response.status_code == 201, response.content
    team = Team.objects.get(slug="robotics")
    assert response.json()["id"] == team.pk
    assert AuditEvent.objects.filter(action="team.created", target_id=str(team.pk)).exists()


@pytest.mark.parametrize("persona", ["lead_a", "dev_a", "finance", "nobody"])
def test_only_admins_create_teams(org: Org, persona: str) -> None:
    response = api_client(getattr(org, persona)).post(
        reverse("team-list"), {"name": "Robotics", "slug": "robotics"}, format="json"
    )
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden"
    assert not Team.objects.filter(slug="robotics").exists()


def test_lead_cannot_rename_own_team(org: Org) -> None:
    response = api_client(org.lead_a).patch(
        reverse("team-detail", kwargs={"pk": org.team_a.pk}), {"name": "Mine"}, format="json"
    )
    assert response.status_code == 403


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


def test_anonymous_cannot_list_teams(org: Org) -> None:
    assert api_client(None).get(reverse("team-list")).status_code == 401
