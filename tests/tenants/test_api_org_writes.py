"""Platform admins change teams, projects, memberships and team quotas; each write is audited
with the fields it changed, and deleting what is still in use is a 409. Who else may write
each of them is their ApiContract's (test_api_teams.py and its neighbours)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from scheduling.models import Quota
from tenants.errors import DomainError, ForbiddenError
from tenants.models import AuditEvent, Membership, Project, Team
from tenants.services.organisation import create_team, update_team
from tests.scheduling import conftest as scheduling_fixtures
from tests.scheduling.conftest import Fleet
from tests.support.factories import GpuRequestFactory
from tests.support.personas import Org, api_client, make_user

pytestmark = pytest.mark.django_db
fleet = scheduling_fixtures.fleet  # the demo fleet, as the scheduling tests have it


def _event(action: str, target: object) -> AuditEvent:
    return AuditEvent.objects.get(action=action, target_id=str(target))


def test_admin_renames_and_deletes_a_team_with_audit(org: Org) -> None:
    admin = api_client(org.admin)
    team = Team.objects.create(name="Robotics", slug="robotics")
    url = reverse("team-detail", kwargs={"pk": team.pk})
    response = admin.patch(url, {"name": "Robots", "description": "arms"}, format="json")
    assert response.status_code == 200, response.content
    changes = _event("team.updated", team.pk).data["changes"]
    assert changes == {"name": ["Robotics", "Robots"], "description": ["", "arms"]}
    assert admin.delete(url).status_code == 204
    assert _event("team.deleted", team.pk).actor == org.admin
    assert not Team.objects.filter(pk=team.pk).exists()


def test_admin_manages_projects_of_any_team_with_audit(org: Org) -> None:
    admin = api_client(org.admin)
    response = admin.post(
        reverse("project-list"),
        {"team": org.team_b.pk, "name": "Voice", "slug": "voice"},
        format="json",
    )
    assert response.status_code == 201, response.content
    pk = response.json()["id"]
    assert _event("project.created", pk).data["fields"] == {"name": "Voice", "slug": "voice"}
    url = reverse("project-detail", kwargs={"pk": pk})
    assert admin.patch(url, {"name": "Voices"}, format="json").status_code == 200
    assert _event("project.updated", pk).data["changes"] == {"name": ["Voice", "Voices"]}
    assert admin.delete(url).status_code == 204
    assert _event("project.deleted", pk).team == org.team_b


def test_a_project_with_requests_is_409_and_kept(org: Org, fleet: Fleet) -> None:
    GpuRequestFactory(project=org.project_a, actor=org.dev_a, flavor=fleet.l4_6g)
    response = api_client(org.admin).delete(
        reverse("project-detail", kwargs={"pk": org.project_a.pk})
    )
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "project_in_use"
    assert Project.objects.filter(pk=org.project_a.pk).exists()
    assert not AuditEvent.objects.filter(action="project.deleted").exists()


def test_admin_grants_changes_and_revokes_roles_with_audit(org: Org) -> None:
    admin = api_client(org.admin)
    make_user("erin")
    response = admin.post(
        reverse("membership-list"), {"user": "erin", "team": None, "role": "finance"}, format="json"
    )
    assert response.status_code == 201, response.content
    assert _event("membership.created", response.json()["id"]).data == {
        "user": "erin",
        "role": "finance",
    }
    membership = Membership.objects.get(user=org.dev_b)
    url = reverse("membership-detail", kwargs={"pk": membership.pk})
    assert admin.patch(url, {"role": "team_lead"}, format="json").status_code == 200
    assert _event("membership.changed", membership.pk).data["changes"] == {
        "role": ["developer", "team_lead"]
    }
    assert admin.delete(url).status_code == 204
    assert _event("membership.deleted", membership.pk).team == org.team_b


def test_admin_sets_changes_and_removes_a_team_quota_with_audit(org: Org, fleet: Fleet) -> None:
    admin = api_client(org.admin)
    Quota.objects.filter(flavor=fleet.mig_3g).delete()
    body = {"team": org.team_b.pk, "flavor": fleet.mig_3g.pk, "guaranteed": 1, "limit": 2}
    response = admin.post(reverse("quota-list"), body, format="json")
    assert response.status_code == 201, response.content
    pk = response.json()["id"]
    assert _event("quota.set", pk).data["after"] == [1, 2]
    url = reverse("quota-detail", kwargs={"pk": pk})
    assert admin.patch(url, {"limit": 4}, format="json").status_code == 200
    assert Quota.objects.get(pk=pk).limit == 4
    assert admin.delete(url).status_code == 204
    assert _event("quota.deleted", pk).actor == org.admin


def test_a_team_quota_split_over_projects_is_409_to_delete(org: Org, fleet: Fleet) -> None:
    team_quota = Quota.objects.get(team=org.team_a, project=None, flavor=fleet.l4_6g)
    Quota.objects.create(
        team=org.team_a, project=org.project_a, flavor=fleet.l4_6g, guaranteed=0, limit=1
    )
    response = api_client(org.admin).delete(reverse("quota-detail", kwargs={"pk": team_quota.pk}))
    assert response.status_code == 409
    assert Quota.objects.filter(pk=team_quota.pk).exists()


def test_services_refuse_unknown_fields_and_non_admins(org: Org) -> None:
    with pytest.raises(DomainError) as refused:
        create_team(actor=org.admin, name="X", slug="x", colour="red")
    assert refused.value.fields == {"colour": "unknown field"}
    with pytest.raises(ForbiddenError):
        update_team(actor=org.finance, team=org.team_a, name="Y")
    with pytest.raises(DomainError) as invalid:
        update_team(actor=org.admin, team=org.team_a, slug="no spaces allowed")
    assert "slug" in invalid.value.fields
