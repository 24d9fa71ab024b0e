from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from scheduling.models import GpuRequest, Quota
from scheduling.selectors.approvals import deferring_lead
from tenants.models import AuditEvent
from tests.scheduling.conftest import Fleet
from tests.scheduling.helpers import request_body
from tests.support.api_contract import ApiContract, World
from tests.support.cross_tenant import result_ids
from tests.support.factories import GpuRequestFactory, api_submit
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db


def a_request_waiting_for_lead_a(world: World) -> GpuRequest:
    org = world.org
    request = GpuRequestFactory.create(
        actor=org.dev_a, project=org.project_a, flavor=world.fleet.a100
    )
    assert request.status == "pending_approval"
    return request


REQUESTS = ApiContract(
    basename="gpu-request",
    subject=a_request_waiting_for_lead_a,
    audit="request",
    may_read={"admin", "lead_a", "dev_a"},
    may_create={"admin", "lead_a", "dev_a"},
    create_body=lambda world: request_body(world.org.project_a, world.fleet.l4_6g),
    actions=(
        *("approve", "reject", "cancel", "resume", "resubmit", "utilisation"),
        *("ask-idle-exemption", "ask-extension", "idle-exemption", "extend", "keep-alive"),
    ),
    list_filters=lambda world: [{"team": world.org.team_a.pk}, {"project": world.org.project_a.pk}],
)
test_requests_api_contract = REQUESTS.tests()


def test_vgpu_request_within_guaranteed_quota_is_approved_and_queued_at_once(
    org: Org, fleet: Fleet
) -> None:
    response = api_submit(
        org.dev_a, request_body(org.project_a, fleet.l4_12g, kind="notebook"), status=201
    )
    body = response.json()
    assert body["status"] == "queued"
    assert body["owner"] == "dev_a"
    assert body["gpu_memory_mib"] == 12288 and body["gpu_cores_percent"] == 25
    assert body["gpu_equivalent"] == "0.5000"
    actions = list(
        AuditEvent.objects.filter(target_id=str(body["id"]), target_type="GpuRequest")
        .order_by("id")
        .values_list("action", flat=True)
    )
    assert actions == ["request.submitted", "request.approved", "request.queued"]


def test_whole_card_training_request_waits_for_the_lead_who_approves_it(
    org: Org, fleet: Fleet
) -> None:
    response = api_submit(
        org.dev_a, request_body(org.project_a, fleet.a100, gpu_count=2), status=201
    )
    body = response.json()
    assert body["status"] == "pending_approval"
    assert "whole cards" in body["needs_lead_approval_because"]

    url = reverse("gpu-request-approve", kwargs={"pk": body["id"]})
    approved = api_client(org.lead_a).post(url, {"comment": "go"}, format="json")
    assert approved.status_code == 200, approved.content
    assert approved.json()["status"] == "queued"
    assert approved.json()["approved_by"] == org.lead_a.pk
    event = AuditEvent.objects.get(action="request.approved", target_id=str(body["id"]))
    assert event.actor == org.lead_a


def test_developers_see_only_their_own_requests_leads_their_team(org: Org, fleet: Fleet) -> None:
    from tests.support.personas import make_user

    teammate = make_user("teammate", "developer", org.team_a)
    mine = api_submit(org.dev_a, request_body(org.project_a, fleet.l4_6g)).json()["id"]
    theirs = api_submit(teammate, request_body(org.project_a, fleet.l4_6g)).json()["id"]
    assert result_ids(api_client(org.dev_a).get(reverse("gpu-request-list"))) == {mine}
    assert result_ids(api_client(org.lead_a).get(reverse("gpu-request-list"))) == {mine, theirs}
    assert result_ids(api_client(org.finance).get(reverse("gpu-request-list"))) == set()


def test_developer_cannot_approve_even_own_team_request(org: Org, fleet: Fleet) -> None:
    gpu_request = api_submit(org.dev_a, request_body(org.project_a, fleet.a100)).json()
    response = api_client(org.dev_a).post(
        reverse("gpu-request-approve", kwargs={"pk": gpu_request["id"]}), {}, format="json"
    )
    assert response.status_code == 403


def test_reject_needs_a_comment_and_is_final(org: Org, fleet: Fleet) -> None:
    pk = api_submit(org.dev_a, request_body(org.project_a, fleet.a100)).json()["id"]
    client = api_client(org.lead_a)
    reject = reverse("gpu-request-reject", kwargs={"pk": pk})
    assert client.post(reject, {"comment": " "}, format="json").status_code == 400
    response = client.post(reject, {"comment": "use the L4 pool"}, format="json")
    assert response.json()["status"] == "rejected"
    conflict = client.post(reverse("gpu-request-approve", kwargs={"pk": pk}), {}, format="json")
    assert conflict.status_code == 409
    assert conflict.json()["error"]["fields"]["status"] == "rejected"


def test_owner_cancels_and_a_second_cancel_changes_nothing(org: Org, fleet: Fleet) -> None:
    pk = api_submit(org.dev_a, request_body(org.project_a, fleet.l4_6g)).json()["id"]
    url = reverse("gpu-request-cancel", kwargs={"pk": pk})
    client = api_client(org.dev_a)
    assert client.post(url, {}, format="json").json()["status"] == "cancelled"
    assert client.post(url, {}, format="json").json()["status"] == "cancelled"
    assert AuditEvent.objects.filter(action="request.cancelled", target_id=str(pk)).count() == 1


def test_approval_past_the_quota_limit_is_409(org: Org, fleet: Fleet) -> None:
    # Team A's A100 limit is 16: four 4-card requests fill it, the fifth cannot be approved.
    client = api_client(org.lead_a)
    ids = [
        api_submit(org.dev_a, request_body(org.project_a, fleet.a100, gpu_count=4)).json()["id"]
        for _ in range(5)
    ]
    for pk in ids[:4]:
        url = reverse("gpu-request-approve", kwargs={"pk": pk})
        assert client.post(url, {}, format="json").status_code == 200
    response = client.post(reverse("gpu-request-approve", kwargs={"pk": ids[4]}), {}, format="json")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "quota_exceeded"
    assert GpuRequest.objects.get(pk=ids[4]).status == "pending_approval"


def test_above_guaranteed_vgpu_request_waits_for_the_lead(org: Org, fleet: Fleet) -> None:
    # L4 12G: guaranteed 8; the ninth unit is borrowed capacity and needs the lead.
    body = api_submit(org.dev_a, request_body(org.project_a, fleet.l4_12g, gpu_count=4)).json()
    assert body["status"] == "queued"
    body = api_submit(org.dev_a, request_body(org.project_a, fleet.l4_12g, gpu_count=4)).json()
    assert body["status"] == "queued"
    body = api_submit(org.dev_a, request_body(org.project_a, fleet.l4_12g, gpu_count=1)).json()
    assert body["status"] == "pending_approval"
    assert "above the guaranteed quota" in body["needs_lead_approval_because"]


def test_high_priority_needs_the_lead(org: Org, fleet: Fleet) -> None:
    body = api_submit(org.dev_a, request_body(org.project_a, fleet.l4_6g, priority="high")).json()
    assert body["status"] == "pending_approval"
    assert "high priority" in body["needs_lead_approval_because"]


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"flavor": 999_999}, "flavor"),
        ({"project": 999_999}, "project"),
        ({"gpu_count": 0}, "gpu_count"),
        ({"gpu_count": "many"}, "gpu_count"),
        ({"kind": "notebook", "gpu_count": 5}, "gpu_count"),  # an L4 node holds 4
        ({"gpu_count": 9}, "gpu_count"),  # the pool has 8 L4 GPUs in all
        ({"gpu_memory_mib": 40_000}, "gpu_memory_mib"),  # an L4 has 24 GiB
        ({"gpu_cores_percent": 101}, "gpu_cores_percent"),
        ({"image": "Not A Valid/Image!!"}, "image"),
        ({"image": ""}, "image"),
        ({"command": "python train.py"}, "command"),
        ({"env": {"1BAD": "x"}}, "env"),
        ({"env": ["A=1"]}, "env"),
        ({"max_runtime_seconds": 9 * 3600}, "max_runtime_seconds"),  # dev tier: 8 h
        ({"priority": "urgent"}, "priority"),
        ({"kind": "daemon"}, "kind"),
        ({"name": ""}, "name"),
        ({"name": "   "}, "name"),
    ],
)
def test_invalid_requests_are_400_naming_the_field(
    org: Org, fleet: Fleet, overrides: dict[str, Any], field: str
) -> None:
    response = api_submit(
        org.dev_a, request_body(org.project_a, fleet.l4_12g, **overrides), status=400
    )
    error = response.json()["error"]
    assert field in error["fields"], error
    # The message says what is wrong without reading `fields`: the field's name and why.
    said = error["message"].startswith(f"{field}: ") or error["message"] == error["fields"][field]
    assert said and "see the fields" not in error["message"], error
    assert not GpuRequest.objects.exists()


def test_flavor_in_a_tier_the_team_may_not_use_is_400(org: Org, fleet: Fleet) -> None:
    response = api_submit(org.dev_b, request_body(org.project_b, fleet.a100), status=400)
    assert "tier" in response.json()["error"]["fields"]["flavor"]


def test_memory_for_a_mig_flavor_is_400(org: Org, fleet: Fleet) -> None:
    response = api_submit(
        org.dev_a,
        request_body(org.project_a, fleet.mig_1g, kind="service", gpu_memory_mib=1000),
        status=400,
    )
    assert "gpu_memory_mib" in response.json()["error"]["fields"]


def test_more_mig_slices_than_the_pool_has_is_400(org: Org, fleet: Fleet) -> None:
    response = api_submit(
        org.dev_a, request_body(org.project_a, fleet.mig_3g, gpu_count=9), status=400
    )
    assert "gpu_count" in response.json()["error"]["fields"]


def test_request_above_the_quota_limit_can_never_be_approved(org: Org, fleet: Fleet) -> None:
    response = api_submit(
        org.dev_a, request_body(org.project_a, fleet.mig_3g, gpu_count=5), status=400
    )
    assert response.json()["error"]["code"] == "quota_exceeded"


def test_developer_cannot_request_in_another_team_project(org: Org, fleet: Fleet) -> None:
    response = api_submit(org.dev_a, request_body(org.project_b, fleet.l4_6g), status=400)
    assert "project" in response.json()["error"]["fields"]


def test_finance_cannot_request_gpus(org: Org, fleet: Fleet) -> None:
    api_submit(org.finance, request_body(org.project_a, fleet.l4_6g), status=403)


def test_status_and_owner_cannot_be_set_by_the_submitter(org: Org, fleet: Fleet) -> None:
    body = request_body(
        org.project_a, fleet.a100, status="running", owner="lead_a", team=org.team_b.pk
    )
    response = api_submit(org.dev_a, body, status=201)
    assert response.json()["status"] == "pending_approval"
    created = GpuRequest.objects.get(pk=response.json()["id"])
    assert (created.owner, created.team) == (org.dev_a, org.team_a)


def test_stale_pending_requests_expire(org: Org, fleet: Fleet) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from scheduling.services.requests import expire_stale_approvals

    pk = api_submit(org.dev_a, request_body(org.project_a, fleet.a100)).json()["id"]
    assert expire_stale_approvals() == 0
    assert expire_stale_approvals(now=timezone.now() + timedelta(days=30)) == 1
    assert expire_stale_approvals(now=timezone.now() + timedelta(days=30)) == 0
    assert GpuRequest.objects.get(pk=pk).status == "expired"


def test_api_approve_over_quota_can_wait_for_quota_instead_of_409(org: Org, fleet: Fleet) -> None:
    Quota.objects.filter(team=org.team_a, flavor=fleet.a100, project__isnull=True).update(
        guaranteed=1, limit=1
    )
    GpuRequestFactory.create(project=org.project_a, flavor=fleet.a100, to="queued")
    waiting = GpuRequestFactory.create(project=org.project_a, flavor=fleet.a100)
    lead = api_client(org.lead_a)
    url = reverse("gpu-request-approve", args=[waiting.pk])
    refused = lead.post(url, {}, format="json")
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "quota_exceeded"
    bad = lead.post(url, {"run_when_quota_frees": "yes"}, format="json")
    assert bad.status_code == 400
    assert "run_when_quota_frees" in bad.json()["error"]["fields"]
    accepted = lead.post(url, {"run_when_quota_frees": True}, format="json")
    assert accepted.status_code == 200
    assert accepted.json()["status"] == "pending_approval"
    assert deferring_lead(waiting) == org.lead_a


def test_api_run_when_quota_frees_on_another_teams_request_is_404(org: Org, fleet: Fleet) -> None:
    theirs = GpuRequestFactory.create(project=org.project_a, flavor=fleet.a100)
    url = reverse("gpu-request-approve", args=[theirs.pk])
    response = api_client(org.lead_b).post(url, {"run_when_quota_frees": True}, format="json")
    assert response.status_code == 404
    assert deferring_lead(theirs) is None
