from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from scheduling.models import GpuRequest
from tenants.models import AuditEvent
from tests.scheduling.conftest import Fleet
from tests.scheduling.helpers import request_body
from tests.support.cross_tenant import assert_other_tenant_hidden, covers, result_ids
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db


def submit(user: Any, body: dict[str, Any]) -> Any:
    return api_client(user).post(reverse("gpu-request-list"), body, format="json")


def test_vgpu_request_within_guaranteed_quota_is_approved_and_queued_at_once(
    org: Org, fleet: Fleet
) -> None:
    response = submit(org.dev_a, request_body(org.project_a, fleet.l4_12g, kind="notebook"))
    assert response.status_code == 201, response.content
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
    response = submit(org.dev_a, request_body(org.project_a, fleet.a100, gpu_count=2))
    assert response.status_code == 201
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


@covers("gpu-request-detail", "gpu-request-approve", "gpu-request-reject", "gpu-request-cancel")
def test_other_team_cannot_see_or_act_on_a_request(org: Org, fleet: Fleet) -> None:
    gpu_request = submit(org.dev_a, request_body(org.project_a, fleet.a100)).json()
    for outsider in (org.lead_b, org.dev_b):
        assert_other_tenant_hidden(
            api_client(outsider),
            detail_route="gpu-request-detail",
            pk=gpu_request["id"],
            list_route="gpu-request-list",
            action_routes=["gpu-request-approve", "gpu-request-reject", "gpu-request-cancel"],
            list_filters=[{"team": org.team_a.pk}, {"project": org.project_a.pk}],
        )
    assert GpuRequest.objects.get(pk=gpu_request["id"]).status == "pending_approval"


def test_developers_see_only_their_own_requests_leads_their_team(org: Org, fleet: Fleet) -> None:
    from tests.support.personas import make_user

    teammate = make_user("teammate", "developer", org.team_a)
    mine = submit(org.dev_a, request_body(org.project_a, fleet.l4_6g)).json()["id"]
    theirs = submit(teammate, request_body(org.project_a, fleet.l4_6g)).json()["id"]
    assert result_ids(api_client(org.dev_a).get(reverse("gpu-request-list"))) == {mine}
    assert result_ids(api_client(org.lead_a).get(reverse("gpu-request-list"))) == {mine, theirs}
    assert result_ids(api_client(org.finance).get(reverse("gpu-request-list"))) == set()


def test_developer_cannot_approve_even_own_team_request(org: Org, fleet: Fleet) -> None:
    gpu_request = submit(org.dev_a, request_body(org.project_a, fleet.a100)).json()
    response = api_client(org.dev_a).post(
        reverse("gpu-request-approve", kwargs={"pk": gpu_request["id"]}), {}, format="json"
    )
    assert response.status_code == 403


def test_reject_needs_a_comment_and_is_final(org: Org, fleet: Fleet) -> None:
    pk = submit(org.dev_a, request_body(org.project_a, fleet.a100)).json()["id"]
    client = api_client(org.lead_a)
    reject = reverse("gpu-request-reject", kwargs={"pk": pk})
    assert client.post(reject, {"comment": " "}, format="json").status_code == 400
    response = client.post(reject, {"comment": "use the L4 pool"}, format="json")
    assert response.json()["status"] == "rejected"
    conflict = client.post(reverse("gpu-request-approve", kwargs={"pk": pk}), {}, format="json")
    assert conflict.status_code == 409
    assert conflict.json()["error"]["fields"]["status"] == "rejected"


def test_owner_cancels_and_a_second_cancel_changes_nothing(org: Org, fleet: Fleet) -> None:
    pk = submit(org.dev_a, request_body(org.project_a, fleet.l4_6g)).json()["id"]
    url = reverse("gpu-request-cancel", kwargs={"pk": pk})
    client = api_client(org.dev_a)
    assert client.post(url, {}, format="json").json()["status"] == "cancelled"
    assert client.post(url, {}, format="json").json()["status"] == "cancelled"
    assert AuditEvent.objects.filter(action="request.cancelled", target_id=str(pk)).count() == 1


def test_approval_past_the_quota_limit_is_409(org: Org, fleet: Fleet) -> None:
    # Team A's A100 limit is 8: two 4-card requests fill it, the third cannot be approved.
    client = api_client(org.lead_a)
    ids = [
        submit(org.dev_a, request_body(org.project_a, fleet.a100, gpu_count=4)).json()["id"]
        for _ in range(3)
    ]
    for pk in ids[:2]:
        url = reverse("gpu-request-approve", kwargs={"pk": pk})
        assert client.post(url, {}, format="json").status_code == 200
    response = client.post(reverse("gpu-request-approve", kwargs={"pk": ids[2]}), {}, format="json")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "quota_exceeded"
    assert GpuRequest.objects.get(pk=ids[2]).status == "pending_approval"


def test_above_guaranteed_vgpu_request_waits_for_the_lead(org: Org, fleet: Fleet) -> None:
    # L4 12G: guaranteed 8; the ninth unit is borrowed capacity and needs the lead.
    body = submit(org.dev_a, request_body(org.project_a, fleet.l4_12g, gpu_count=4)).json()
    assert body["status"] == "queued"
    body = submit(org.dev_a, request_body(org.project_a, fleet.l4_12g, gpu_count=4)).json()
    assert body["status"] == "queued"
    body = submit(org.dev_a, request_body(org.project_a, fleet.l4_12g, gpu_count=1)).json()
    assert body["status"] == "pending_approval"
    assert "above the guaranteed quota" in body["needs_lead_approval_because"]


def test_high_priority_needs_the_lead(org: Org, fleet: Fleet) -> None:
    body = submit(org.dev_a, request_body(org.project_a, fleet.l4_6g, priority="high")).json()
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
    ],
)
def test_invalid_requests_are_400_naming_the_field(
    org: Org, fleet: Fleet, overrides: dict[str, Any], field: str
) -> None:
    response = submit(org.dev_a, request_body(org.project_a, fleet.l4_12g, **overrides))
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["fields"], response.json()
    assert not GpuRequest.objects.exists()


def test_flavor_in_a_tier_the_team_may_not_use_is_400(org: Org, fleet: Fleet) -> None:
    response = submit(org.dev_b, request_body(org.project_b, fleet.a100))
    assert response.status_code == 400
    assert "tier" in response.json()["error"]["fields"]["flavor"]


def test_memory_for_a_mig_flavor_is_400(org: Org, fleet: Fleet) -> None:
    response = submit(
        org.dev_a, request_body(org.project_a, fleet.mig_1g, kind="service", gpu_memory_mib=1000)
    )
    assert response.status_code == 400
    assert "gpu_memory_mib" in response.json()["error"]["fields"]


def test_more_mig_slices_than_the_pool_has_is_400(org: Org, fleet: Fleet) -> None:
    response = submit(org.dev_a, request_body(org.project_a, fleet.mig_3g, gpu_count=9))
    assert response.status_code == 400
    assert "gpu_count" in response.json()["error"]["fields"]


def test_request_above_the_quota_limit_can_never_be_approved(org: Org, fleet: Fleet) -> None:
    response = submit(org.dev_a, request_body(org.project_a, fleet.mig_3g, gpu_count=5))
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "quota_exceeded"


def test_developer_cannot_request_in_another_team_project(org: Org, fleet: Fleet) -> None:
    response = submit(org.dev_a, request_body(org.project_b, fleet.l4_6g))
    assert response.status_code == 400
    assert "project" in response.json()["error"]["fields"]


def test_finance_cannot_request_gpus(org: Org, fleet: Fleet) -> None:
    response = submit(org.finance, request_body(org.project_a, fleet.l4_6g))
    assert response.status_code == 403


def test_status_and_owner_cannot_be_set_by_the_submitter(org: Org, fleet: Fleet) -> None:
    body = request_body(
        org.project_a, fleet.a100, status="running", owner="lead_a", team=org.team_b.pk
    )
    response = submit(org.dev_a, body)
    assert response.status_code == 201
    assert response.json()["status"] == "pending_approval"
    created = GpuRequest.objects.get(pk=response.json()["id"])
    assert (created.owner, created.team) == (org.dev_a, org.team_a)


def test_requests_are_not_edited_or_deleted(org: Org, fleet: Fleet) -> None:
    pk = submit(org.dev_a, request_body(org.project_a, fleet.l4_6g)).json()["id"]
    url = reverse("gpu-request-detail", kwargs={"pk": pk})
    client = api_client(org.dev_a)
    assert client.patch(url, {"gpu_count": 2}, format="json").status_code == 405
    assert client.delete(url).status_code == 405


def test_anonymous_cannot_submit(org: Org, fleet: Fleet) -> None:
    response = api_client(None).post(
        reverse("gpu-request-list"), request_body(org.project_a, fleet.l4_6g), format="json"
    )
    assert response.status_code == 401


def test_stale_pending_requests_expire(org: Org, fleet: Fleet) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from scheduling.services import expire_stale_approvals

    pk = submit(org.dev_a, request_body(org.project_a, fleet.a100)).json()["id"]
    assert expire_stale_approvals() == 0
    assert expire_stale_approvals(now=timezone.now() + timedelta(days=30)) == 1
    assert expire_stale_approvals(now=timezone.now() + timedelta(days=30)) == 0
    assert GpuRequest.objects.get(pk=pk).status == "expired"
