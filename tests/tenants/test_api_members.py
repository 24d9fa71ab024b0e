from __future__ import annotations

import pytest
from django.urls import reverse

from tenants.models import Membership
from tests.support.api_contract import ApiContract, World
from tests.support.cross_tenant import result_ids
from tests.support.factories import UserFactory
from tests.support.personas import Org, api_client, make_user

pytestmark = pytest.mark.django_db


def a_newcomer_joins_team_a(world: World) -> dict[str, object]:
    newcomer = UserFactory.create(username="newcomer")
    return {"user": newcomer.username, "team": world.org.team_a.pk, "role": "developer"}


MEMBERS = ApiContract(
    basename="membership",
    subject=lambda world: Membership.objects.get(user=world.org.dev_a),
    audit="membership",
    may_read={"admin", "lead_a", "dev_a"},
    may_create={"admin", "lead_a"},
    may_update={"admin", "lead_a"},
    may_delete={"admin", "lead_a"},
    create_body=a_newcomer_joins_team_a,
    update_body={"role": "team_lead"},
    list_filters=lambda world: [{"team": world.org.team_a.pk}, {"user": "dev_a"}],
)
test_members_api_contract = MEMBERS.tests()


def test_members_see_their_team_roster(org: Org) -> None:
    response = api_client(org.dev_a).get(reverse("membership-list"))
    usernames = {row["user"] for row in response.json()["results"]}
    assert usernames == {"lead_a", "dev_a"}


def test_finance_sees_no_memberships(org: Org) -> None:
    assert result_ids(api_client(org.finance).get(reverse("membership-list"))) == set()


def test_lead_adds_developer_to_own_team(org: Org) -> None:
    newcomer = make_user("newcomer")
    response = api_client(org.lead_a).post(
        reverse("membership-list"),
        {"user": "newcomer", "team": org.team_a.pk, "role": "developer"},
        format="json",
    )
    assert response.status_code == 201, response.content
    assert Membership.objects.filter(user=newcomer, team=org.team_a, role="developer").exists()


def test_lead_cannot_grant_organisation_roles(org: Org) -> None:
    response = api_client(org.lead_a).post(
        reverse("membership-list"),
        {"user": "dev_a", "team": None, "role": "finance"},
        format="json",
    )
    assert response.status_code == 403
    assert not Membership.objects.filter(user=org.dev_a, role="finance").exists()


def test_role_and_team_mismatch_is_400(org: Org) -> None:
    client = api_client(org.admin)
    response = client.post(
        reverse("membership-list"),
        {"user": "nobody", "team": org.team_a.pk, "role": "finance"},
        format="json",
    )
    assert response.status_code == 400
    response = client.post(
        reverse("membership-list"), {"user": "nobody", "role": "developer"}, format="json"
    )
    assert response.status_code == 400
    assert "team" in response.json()["error"]["fields"]


def test_unknown_user_or_role_is_400_naming_the_field(org: Org) -> None:
    response = api_client(org.lead_a).post(
        reverse("membership-list"),
        {"user": "ghost", "team": org.team_a.pk, "role": "wizard"},
        format="json",
    )
    assert response.status_code == 400
    assert set(response.json()["error"]["fields"]) == {"user", "role"}


def test_second_membership_in_same_team_is_409(org: Org) -> None:
    response = api_client(org.lead_a).post(
        reverse("membership-list"),
        {"user": "dev_a", "team": org.team_a.pk, "role": "team_lead"},
        format="json",
    )
    assert response.status_code == 409


def test_lead_promotes_and_removes_member(org: Org) -> None:
    client = api_client(org.lead_a)
    membership = Membership.objects.get(user=org.dev_a)
    url = reverse("membership-detail", kwargs={"pk": membership.pk})
    response = client.patch(url, {"role": "team_lead", "team": org.team_b.pk}, format="json")
    assert response.status_code == 200
    membership.refresh_from_db()
    assert (membership.role, membership.team) == ("team_lead", org.team_a)
    assert client.delete(url).status_code == 204
    assert not Membership.objects.filter(pk=membership.pk).exists()
