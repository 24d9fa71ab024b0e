"""The API takes what its schema says and nothing else: what the contract run found accepted.

1. A boolean is JSON's true or false: 0, 1, "true" or "yes" are a 400 naming the field.
2. A body is JSON: a form-encoded one is a 415, not an empty update.
3. Several references are a JSON list: an object is a 400 (DRF took a dict's keys).
4. A reference by slug with characters no slug has (NUL) is a 400, not a database error.
5. An audit event the system took by itself has a null actor, and the schema says it may.
6. A field fixed once the object is created (a membership's user and team, a quota's team,
   project and flavor, a rule's tier, a template's or storage quota's team) is not in the
   schema's PATCH body; a PATCH that sends one changes nothing of it.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse
from drf_spectacular.generators import SchemaGenerator

from scheduling.models import ApprovalRule, Quota, ReclaimPolicy
from tenants.models import AuditEvent, Membership
from tests.support.fleet import Fleet, make_fleet
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet(org: Org) -> Fleet:
    return make_fleet(org)


@pytest.mark.parametrize("value", [0, 1, "true", "yes", "on", None])
def test_a_boolean_is_true_or_false(org: Org, fleet: Fleet, value: Any) -> None:
    rule = ApprovalRule.objects.get(tier__slug="training")
    url = reverse("approval-rule-detail", kwargs={"pk": rule.pk})
    admin = api_client(org.admin)

    response = admin.patch(url, {"lead_approves_whole_cards": value}, format="json")

    assert response.status_code == 400, response.content
    assert "lead_approves_whole_cards" in response.json()["error"]["fields"]
    rule.refresh_from_db()
    assert rule.lead_approves_whole_cards is True
    assert admin.patch(url, {"lead_approves_whole_cards": False}, format="json").status_code == 200
    rule.refresh_from_db()
    assert rule.lead_approves_whole_cards is False


def test_a_boolean_a_serializer_declares_is_strict_too(org: Org, fleet: Fleet) -> None:
    body = {
        "project": org.project_a.pk,
        "flavor": fleet.l4_12g.pk,
        "gpu_count": 1,
        "image": "pytorch/pytorch:2.4.0",
        "max_runtime_seconds": 3600,
        "is_preemptible": 1,
    }
    response = api_client(org.dev_a).post(reverse("gpu-request-list"), body, format="json")
    assert response.status_code == 400
    assert "is_preemptible" in response.json()["error"]["fields"]


def test_a_form_encoded_body_is_415(org: Org, fleet: Fleet) -> None:
    policy = ReclaimPolicy.objects.get(tier__slug="dev")
    url = reverse("reclaim-policy-detail", kwargs={"pk": policy.pk})
    response = api_client(org.admin).patch(
        url, "max_attempts=9", content_type="application/x-www-form-urlencoded"
    )
    assert response.status_code == 415
    assert response.json()["error"]["code"]
    policy.refresh_from_db()
    assert policy.max_attempts != 9


def test_fields_fixed_once_created_are_not_in_the_patch_schema() -> None:
    components = SchemaGenerator().get_schema(request=None, public=True)["components"]["schemas"]
    fixed = {
        "PatchedMembershipRequest": {"user", "team"},
        "PatchedQuotaRequest": {"team", "project", "flavor"},
        "PatchedApprovalRuleRequest": {"tier"},
        "PatchedReclaimPolicyRequest": {"tier"},
        "PatchedRequestTemplateRequest": {"team"},
        "PatchedStorageQuotaRequest": {"team"},
    }
    for name, fields in fixed.items():
        assert not fields & set(components[name]["properties"]), name
    # Creating still takes them.
    assert {"user", "team"} <= set(components["MembershipRequest"]["properties"])
    assert {"team", "flavor"} <= set(components["QuotaRequest"]["properties"])


def test_a_patch_that_sends_a_fixed_field_changes_only_the_rest(org: Org, fleet: Fleet) -> None:
    membership = Membership.objects.get(user=org.dev_a, team=org.team_a)
    response = api_client(org.admin).patch(
        reverse("membership-detail", kwargs={"pk": membership.pk}),
        {"team": org.team_b.pk, "user": org.lead_b.username, "role": "team_lead"},
        format="json",
    )
    assert response.status_code == 200
    membership.refresh_from_db()
    assert (membership.user, membership.team, membership.role) == (
        org.dev_a,
        org.team_a,
        "team_lead",
    )
    quota = Quota.objects.filter(team=org.team_a, project=None).first()
    assert quota is not None
    response = api_client(org.admin).patch(
        reverse("quota-detail", kwargs={"pk": quota.pk}),
        {"flavor": {}, "limit": quota.limit + 1},
        format="json",
    )
    assert response.status_code == 200
    quota.refresh_from_db()
    assert quota.limit == response.json()["limit"]


@pytest.mark.parametrize("teams", [{}, {"1": 1}, "1", 1])
def test_several_references_are_a_list(org: Org, teams: Any) -> None:
    body = {"name": "Batch", "slug": "batch", "allowed_teams": teams}
    response = api_client(org.admin).post(reverse("tier-list"), body, format="json")
    assert response.status_code == 400, response.content
    assert "allowed_teams" in response.json()["error"]["fields"]


@pytest.mark.parametrize(
    ("route", "field"), [("reclaim-policy-list", "tier"), ("approval-rule-list", "tier"),
                         ("pool-list", "tier"), ("flavor-list", "pool")],
)  # fmt: skip
def test_a_slug_reference_with_nul_is_400(org: Org, fleet: Fleet, route: str, field: str) -> None:
    response = api_client(org.admin).post(reverse(route), {field: "dev\x00"}, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["fields"]


def test_the_systems_own_decisions_have_a_null_actor(org: Org) -> None:
    AuditEvent.objects.create(action="cycle.admitted", target_type="GpuRequest", target_id="1")
    components = SchemaGenerator().get_schema(request=None, public=True)["components"]["schemas"]
    assert components["AuditEvent"]["properties"]["actor"]["nullable"] is True
    events = api_client(org.admin).get(reverse("audit-event-list")).json()["results"]
    assert [event["actor"] for event in events if event["action"] == "cycle.admitted"] == [None]


@pytest.mark.parametrize("value", [0, 12, 1.5])
def test_text_is_a_json_string(org: Org, fleet: Fleet, value: Any) -> None:
    body = {
        "project": org.project_a.pk,
        "flavor": fleet.l4_12g.pk,
        "gpu_count": 1,
        "image": "pytorch/pytorch:2.4.0",
        "max_runtime_seconds": 3600,
        "name": value,
    }
    response = api_client(org.dev_a).post(reverse("gpu-request-list"), body, format="json")
    assert response.status_code == 400, response.content
    assert "name" in response.json()["error"]["fields"]
    team = api_client(org.admin).patch(
        reverse("team-detail", kwargs={"pk": org.team_a.pk}), {"name": value}, format="json"
    )
    assert team.status_code == 400


def test_follow_is_true_or_false(org: Org, fleet: Fleet) -> None:
    from tests.accounting.factories import make_request

    request = make_request(
        project=org.project_a, owner=org.dev_a, flavor=fleet.l4_12g, status="running"
    )
    url = reverse("gpu-request-logs", kwargs={"pk": request.pk})
    client = api_client(org.dev_a)
    answer = client.get(url, {"follow": "-58800"})
    assert answer.status_code == 400
    assert "follow" in answer.json()["error"]["fields"]
    assert client.get(url, {"follow": "false"}).status_code != 400


def test_every_write_documents_its_400(org: Org) -> None:
    paths = SchemaGenerator().get_schema(request=None, public=True)["paths"]
    resubmit = paths["/api/v1/requests/{id}/resubmit/"]["post"]
    assert "400" in resubmit["responses"]


def test_the_summary_answers_four_decimal_places(org: Org, fleet: Fleet) -> None:
    from decimal import Decimal

    from tests.accounting.factories import make_request

    for _ in range(3):
        request = make_request(
            project=org.project_a, owner=org.dev_a, flavor=fleet.l4_12g, status="running"
        )
        type(request).objects.filter(pk=request.pk).update(gpu_equivalent=Decimal("0.7619"))
    summary = api_client(org.dev_a).get(reverse("gpu-request-summary")).json()
    assert summary["committed_gpu_equivalent"] == "2.2857"
