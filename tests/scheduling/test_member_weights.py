"""A member's fair-share weight inside the team: set by the team's lead (or a platform admin)
through `PATCH /api/v1/members/<id>/`, audited as `membership.changed`, read by the cycle's
snapshot, and felt in the cards each member gets when the team's members all have work waiting.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import IntegrityError, transaction
from django.test import TestCase
from django.urls import reverse

from scheduling.choices import RequestStatus
from scheduling.engine.types import Member
from scheduling.models import Allocation, GpuRequest, Quota
from scheduling.selectors.snapshot import build_snapshot
from scheduling.services import cycle
from tenants.choices import Role
from tenants.models import AuditEvent, Membership
from tests.support.cross_tenant import covers
from tests.support.factories import GpuRequestFactory, ready_flavor
from tests.support.personas import Org, api_client, make_user

pytestmark = pytest.mark.django_db


def _member_url(membership: Membership) -> str:
    return reverse("membership-detail", kwargs={"pk": membership.pk})


def _changed_events(membership: Membership) -> list[AuditEvent]:
    return list(
        AuditEvent.objects.filter(action="membership.changed", target_id=str(membership.pk))
    )


# ----------------------------------------------------------------------------- the API


def test_lead_sets_a_members_weight_and_the_change_is_audited(org: Org) -> None:
    membership = Membership.objects.get(user=org.dev_a)

    response = api_client(org.lead_a).patch(
        _member_url(membership), {"fair_share_weight": 3}, format="json"
    )

    assert response.status_code == 200, response.content
    assert response.json()["fair_share_weight"] == 3
    assert response.json()["role"] == "developer"
    membership.refresh_from_db()
    assert membership.fair_share_weight == 3
    (event,) = _changed_events(membership)
    assert event.actor == org.lead_a
    assert event.team == org.team_a
    assert event.data == {"user": "dev_a", "changes": {"fair_share_weight": [1, 3]}}


def test_one_patch_changes_role_and_weight_in_one_audited_diff(org: Org) -> None:
    membership = Membership.objects.get(user=org.dev_b)
    response = api_client(org.admin).patch(
        _member_url(membership), {"role": "team_lead", "fair_share_weight": 7}, format="json"
    )
    assert response.status_code == 200, response.content
    (event,) = _changed_events(membership)
    assert event.actor == org.admin
    assert event.data["changes"] == {
        "role": ["developer", "team_lead"],
        "fair_share_weight": [1, 7],
    }


def test_the_member_list_shows_each_members_weight(org: Org) -> None:
    Membership.objects.filter(user=org.dev_a).update(fair_share_weight=4)
    response = api_client(org.dev_a).get(reverse("membership-list"))
    weights = {row["user"]: row["fair_share_weight"] for row in response.json()["results"]}
    assert weights == {"lead_a": 1, "dev_a": 4}


def test_a_new_member_may_be_given_a_weight_and_weighs_1_by_default(org: Org) -> None:
    make_user("erin")
    make_user("fred")
    lead = api_client(org.lead_a)
    body = {"team": org.team_a.pk, "role": "developer"}
    weighted = lead.post(
        reverse("membership-list"), body | {"user": "erin", "fair_share_weight": 2}, format="json"
    )
    plain = lead.post(reverse("membership-list"), body | {"user": "fred"}, format="json")
    assert (weighted.status_code, plain.status_code) == (201, 201)
    assert weighted.json()["fair_share_weight"] == 2
    assert plain.json()["fair_share_weight"] == 1
    event = AuditEvent.objects.get(action="membership.created", target_id=weighted.json()["id"])
    assert event.data["fair_share_weight"] == 2


@pytest.mark.parametrize("persona", ["dev_a", "finance"])
def test_only_the_lead_or_an_admin_changes_a_weight(org: Org, persona: str) -> None:
    membership = Membership.objects.get(user=org.dev_a)
    response = api_client(getattr(org, persona)).patch(
        _member_url(membership), {"fair_share_weight": 9}, format="json"
    )
    # dev_a sees the roster (403); finance sees no membership at all (404).
    assert response.status_code == (403 if persona == "dev_a" else 404)
    membership.refresh_from_db()
    assert membership.fair_share_weight == 1
    assert _changed_events(membership) == []


@covers("membership-detail")
def test_a_lead_cannot_change_a_weight_in_another_team(org: Org) -> None:
    other = Membership.objects.get(user=org.dev_b)

    response = api_client(org.lead_a).patch(
        _member_url(other), {"fair_share_weight": 50}, format="json"
    )

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    other.refresh_from_db()
    assert other.fair_share_weight == 1
    assert _changed_events(other) == []
    # Nor read it: the other team's membership does not exist for lead A.
    assert api_client(org.lead_a).get(_member_url(other)).status_code == 404


@pytest.mark.parametrize("weight", [0, -1, 101, 1000, 2.5, "3", "three", True, None, [3]])
def test_a_weight_outside_1_to_100_or_not_a_whole_number_is_400(org: Org, weight: Any) -> None:
    membership = Membership.objects.get(user=org.dev_a)

    response = api_client(org.lead_a).patch(
        _member_url(membership), {"fair_share_weight": weight}, format="json"
    )

    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid"
    assert set(error["fields"]) == {"fair_share_weight"}
    if weight is not None:
        assert error["fields"]["fair_share_weight"] == (
            "The fair-share weight is a whole number from 1 to 100."
        )
    membership.refresh_from_db()
    assert membership.fair_share_weight == 1
    assert _changed_events(membership) == []


def test_the_bounds_1_and_100_are_accepted(org: Org) -> None:
    membership = Membership.objects.get(user=org.dev_a)
    lead = api_client(org.lead_a)
    for weight in (100, 1):
        response = lead.patch(_member_url(membership), {"fair_share_weight": weight}, format="json")
        assert response.status_code == 200, response.content
        membership.refresh_from_db()
        assert membership.fair_share_weight == weight


def test_an_organisation_role_has_no_weight(org: Org) -> None:
    membership = Membership.objects.get(user=org.finance)
    response = api_client(org.admin).patch(
        _member_url(membership), {"fair_share_weight": 2}, format="json"
    )
    assert response.status_code == 400
    assert "team memberships only" in response.json()["error"]["message"]
    membership.refresh_from_db()
    assert membership.fair_share_weight == 1


def test_the_database_refuses_a_weight_outside_1_to_100(org: Org) -> None:
    membership = Membership.objects.get(user=org.dev_a)
    for weight in (0, 101):
        with pytest.raises(IntegrityError), transaction.atomic():
            Membership.objects.filter(pk=membership.pk).update(fair_share_weight=weight)
    membership.refresh_from_db()
    assert membership.fair_share_weight == 1


# ----------------------------------------------------------------------------- the cycle


def test_the_snapshot_carries_each_weighted_member_by_team_and_user(org: Org) -> None:
    Membership.objects.filter(user=org.dev_a).update(fair_share_weight=3)
    Membership.objects.filter(user=org.lead_b).update(fair_share_weight=2)

    members = build_snapshot().members

    # Requests name their owner by user id, so the engine's member is the user id too.
    assert members == (
        Member(team="team-a", name=str(org.dev_a.pk), weight=3.0),
        Member(team="team-b", name=str(org.lead_b.pk), weight=2.0),
    )


def _cards_by_owner() -> dict[str, int]:
    held: dict[str, int] = {}
    for username, cards in Allocation.objects.active().values_list(
        "request__owner__username", "request__gpu_count"
    ):
        held[username] = held.get(username, 0) + cards
    return held


@pytest.mark.parametrize(("weight", "expected"), [(3, {"dev_a": 9, "dev_a2": 3}), (1, None)])
def test_a_weight_3_member_gets_3_times_the_cards_of_a_weight_1_member(
    org: Org, weight: int, expected: dict[str, int] | None
) -> None:
    """Both members queue 15 one-card jobs on a 12-card pool; the weight-1 member queued first.
    With weights 3 and 1 the cycle gives 9 and 3 cards; with equal weights 6 and 6."""
    second = make_user("dev_a2", Role.DEVELOPER, org.team_a)
    flavor = ready_flavor(team=org.team_a, gpus=12)
    # Queued work counts against the limit: room for both queues, not more cards to run them.
    Quota.objects.filter(team=org.team_a, flavor=flavor).update(limit=30)
    for owner in (second, org.dev_a):
        GpuRequestFactory.create_batch(
            15, project=org.project_a, flavor=flavor, actor=owner, kind="job", to="queued"
        )
    Membership.objects.filter(user=org.dev_a).update(fair_share_weight=weight)

    with TestCase.captureOnCommitCallbacks(execute=False):
        result = cycle.run_cycle()

    assert result.ran and len(result.admitted) == 12
    held = _cards_by_owner()
    assert held == (expected or {"dev_a": 6, "dev_a2": 6})
    # Both lines are still long: the split is the weights', not a shortage of work.
    queued = GpuRequest.objects.filter(status=RequestStatus.QUEUED)
    for username, cards in held.items():
        assert queued.filter(owner__username=username).count() == 15 - cards > 0
