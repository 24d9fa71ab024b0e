"""One blocker per waiting request: each code from the situation that causes it, then where it
shows (the API and its schema, the request page)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client, TestCase
from django.urls import reverse

from accounting.choices import OverBudgetPolicy
from accounting.models import Budget
from runtime.cluster.base import WorkloadStatus
from runtime.cluster.kueue_workloads import KueueView
from runtime.services import execution, kueue_admission
from scheduling.choices import RequestStatus
from scheduling.engine.planner import plan
from scheduling.models import Allocation, Flavor, GpuRequest, Quota, Tier
from scheduling.selectors.snapshot import build_snapshot
from scheduling.services import blockers, cycle
from scheduling.services.requests import approve_gpu_request
from scheduling.services.row_updates import update_shared_json
from tests.accounting.test_api import usage  # noqa: F401  (fixture)
from tests.scheduling.conftest import Fleet
from tests.support.factories import (
    FlavorFactory,
    GpuDeviceFactory,
    GpuRequestFactory,
    NodeFactory,
    QuotaFactory,
    TierFactory,
    report_running,
)
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db


def whole_pool(
    org: Org, *, nodes: tuple[int, ...], guaranteed: int, limit: int, cordoned: int | None = None
) -> Flavor:
    """A whole-card flavor of team A in a pool of its own: one node per entry of `nodes`, with
    that many cards; node number `cordoned` takes no work."""
    tier = TierFactory.create(allowed_teams=[org.team_a])
    flavor: Flavor = FlavorFactory.create(pool__tier=tier)
    for number, gpus in enumerate(nodes):
        node = NodeFactory.create(
            pool=flavor.pool,
            gpu_model=flavor.gpu_model,
            name=f"{flavor.pool.slug}-node-{number}",
            is_schedulable=number != cordoned,
        )
        for index in range(gpus):
            GpuDeviceFactory.create(node=node, index=index, memory_mib=flavor.gpu_memory_mib)
    QuotaFactory.create(team=org.team_a, flavor=flavor, guaranteed=guaranteed, limit=limit)
    return flavor


def submit(org: Org, flavor: Flavor, gpu_count: int, **fields: Any) -> GpuRequest:
    return GpuRequestFactory.create(
        project=org.project_a, flavor=flavor, gpu_count=gpu_count, to="queued", **fields
    )


def run_cycle() -> cycle.CycleResult:
    with TestCase.captureOnCommitCallbacks(execute=False):
        return cycle.run_cycle()


def blocker_of(request: GpuRequest) -> dict[str, Any]:
    request.refresh_from_db()
    return request.blocker


def waiting_one(*requests: GpuRequest) -> GpuRequest:
    """The only one of `requests` the cycle left queued."""
    left = [r for r in requests if GpuRequest.objects.get(pk=r.pk).status == RequestStatus.QUEUED]
    assert len(left) == 1, [GpuRequest.objects.get(pk=r.pk).waiting_reason for r in requests]
    return left[0]


# ----------------------------------------------------------------------------- each code


def test_a_request_past_the_team_quota_is_blocked_by_team_quota(org: Org) -> None:
    flavor = whole_pool(org, nodes=(8,), guaranteed=4, limit=4)
    first, second = submit(org, flavor, 2), submit(org, flavor, 2)
    Quota.objects.filter(flavor=flavor).update(guaranteed=2, limit=2)  # an admin lowers it
    run_cycle()
    blocker = blocker_of(waiting_one(first, second))
    assert blocker["code"] == "team_quota"
    assert blocker["message"] == (
        f"Team Team A uses all 2 GPUs of its {flavor.name} quota; it starts as the team's own "
        "work ends."
    )
    assert blocker["detail"]["used_ge"] == 2.0 and blocker["detail"]["limit_ge"] == 2.0


def test_a_request_that_must_borrow_with_nothing_to_lend_is_blocked_by_borrowing_limit(
    org: Org,
) -> None:
    flavor = whole_pool(org, nodes=(8,), guaranteed=2, limit=4)
    # Its tier keeps the 6 cards nobody is guaranteed: there is nothing to lend.
    Tier.objects.filter(pools=flavor.pool).update(lends_unassigned=False)
    first, second = submit(org, flavor, 2), submit(org, flavor, 2)  # the second: lead-approved
    run_cycle()
    blocker = blocker_of(waiting_one(first, second))
    assert blocker["code"] == "borrowing_limit"
    assert blocker["message"] == (
        f"Team Team A uses 2 GPUs of {flavor.name}, 2 guaranteed, and too little is free to "
        "borrow more: 0 idle in other teams' guarantees and every "
        f"{flavor.name} card is guaranteed to a team or not lent by its tier; 2 needed."
    )


def test_a_request_past_its_guarantee_borrows_the_cards_nobody_is_guaranteed(org: Org) -> None:
    flavor = whole_pool(org, nodes=(8,), guaranteed=2, limit=4)
    first, second = submit(org, flavor, 2), submit(org, flavor, 2)
    assert sorted(run_cycle().admitted) == sorted([first.pk, second.pk])
    assert Allocation.objects.get(request=second).is_borrowed


def test_a_request_in_a_full_pool_is_blocked_by_capacity(org: Org) -> None:
    flavor = whole_pool(org, nodes=(4,), guaranteed=16, limit=16)
    first, second = submit(org, flavor, 4), submit(org, flavor, 2)
    run_cycle()
    assert waiting_one(first, second) == second
    blocker = blocker_of(second)
    assert blocker["code"] == "capacity"
    assert blocker["message"] == (
        f"Pool {flavor.pool.name} has too little free for the 2 GPU-eq it needs; it starts as "
        "running work ends."
    )


def test_enough_free_cards_but_none_together_is_fragmentation(org: Org) -> None:
    flavor = whole_pool(org, nodes=(4, 4), guaranteed=16, limit=16)
    three_a, three_b, two = submit(org, flavor, 3), submit(org, flavor, 3), submit(org, flavor, 2)
    run_cycle()
    assert waiting_one(three_a, three_b, two) == two
    blocker = blocker_of(two)
    assert blocker["code"] == "fragmentation"
    assert blocker["message"] == (
        f"Pool {flavor.pool.name} has 2 GPU-eq free, enough for the 2 it needs, but no single "
        "node or GPU has room for it."
    )
    assert blocker["detail"]["free_ge"] == 2.0


def test_free_slices_that_the_mig_layout_does_not_offer_are_a_mig_layout_blocker(
    org: Org,
) -> None:
    tier = TierFactory.create(allowed_teams=[org.team_a])
    flavor: Flavor = FlavorFactory.create(
        mig=True, mig_profile="3g.40gb", gpu_equivalent=Decimal("0.4286"), pool__tier=tier
    )
    node = NodeFactory.create(pool=flavor.pool, gpu_model=flavor.gpu_model)
    GpuDeviceFactory.create(node=node, index=0, mig_layout={"3g.40gb": 2})
    GpuDeviceFactory.create(node=node, index=1, mig_layout={"1g.10gb": 7})  # all free
    QuotaFactory.create(team=org.team_a, flavor=flavor, guaranteed=8, limit=8)
    requests = [submit(org, flavor, 1) for _ in range(3)]
    run_cycle()
    blocker = blocker_of(waiting_one(*requests))
    assert blocker["code"] == "mig_layout"
    assert blocker["message"] == (
        f"The MIG layout of pool {flavor.pool.name}'s cards offers 0 free 3g.40gb instances, "
        "1 needed."
    )


def test_capacity_only_on_a_cordoned_node_is_a_node_health_blocker(org: Org) -> None:
    flavor = whole_pool(org, nodes=(4, 4), guaranteed=16, limit=16, cordoned=1)
    first, second = submit(org, flavor, 4), submit(org, flavor, 2)
    run_cycle()
    assert waiting_one(first, second) == second
    blocker = blocker_of(second)
    assert blocker["code"] == "node_health"
    assert blocker["message"] == (
        "The capacity it needs is on nodes that take no work now (cordoned, held back or not "
        f"ready): {flavor.pool.slug}-node-1."
    )
    assert blocker["detail"]["nodes"] == [f"{flavor.pool.slug}-node-1"]


def test_an_image_the_cluster_cannot_pull_is_a_cluster_blocker_until_it_runs(org: Org) -> None:
    flavor = whole_pool(org, nodes=(4,), guaranteed=4, limit=4)
    request = GpuRequestFactory.create(project=org.project_a, flavor=flavor, to="launching")
    allocation = Allocation.objects.get(request=request, attempt=request.attempt)
    pending = WorkloadStatus(
        request_id=str(request.pk),
        attempt=request.attempt,
        phase="pending",
        reason="ErrImagePull",
        message="cannot pull image registry.example.com/x:1: pull access denied",
        namespace=request.project.namespace,
        name=allocation.workload_name,
    )
    execution.apply_workload_status(request, pending)
    fails_at = Allocation.objects.get(pk=allocation.pk).image_pull_failing_since
    assert fails_at is not None
    fails_at += timedelta(seconds=settings.IMAGE_PULL_GRACE_SECONDS)
    assert blocker_of(request) == {
        "code": "cluster",
        "message": "Cannot pull image registry.example.com/x:1: pull access denied; the "
        f"request fails at {fails_at:%H:%M} UTC unless the pull succeeds.",
        "detail": {
            "reason": "ErrImagePull: cannot pull image registry.example.com/x:1: pull access denied"
        },
    }
    report_running(request)
    assert blocker_of(request) == {}


def test_a_job_kueue_holds_is_a_cluster_blocker_until_kueue_admits_it(org: Org) -> None:
    flavor = whole_pool(org, nodes=(4,), guaranteed=4, limit=4)
    request = submit(org, flavor, 1)
    GpuRequest.objects.filter(pk=request.pk).update(status=RequestStatus.LAUNCHING, attempt=1)
    Allocation.objects.create(request=request, attempt=1, pool=flavor.pool, claims=[])
    request = GpuRequest.objects.select_related("project").get(pk=request.pk)
    key = (org.project_a.namespace, f"gpr-{request.pk}-a1")
    held = KueueView(*key, "pending", "Pending", "insufficient unused quota", "cq", position=1)
    kueue_admission.apply_kueue_views([request], {key: held})
    assert blocker_of(request) == {
        "code": "cluster",
        "message": "Kueue holds it until the team's ClusterQueue has quota for it.",
        "detail": {"reason": "insufficient unused quota"},
    }
    admitted = KueueView(*key, "admitted", "Admitted", "Admitted", "cq")
    kueue_admission.apply_kueue_views([request], {key: admitted})
    assert blocker_of(request) == {}


def test_a_request_beyond_the_guarantee_awaits_approval_then_quota(org: Org) -> None:
    flavor = whole_pool(org, nodes=(8,), guaranteed=2, limit=8)
    Tier.objects.filter(pools=flavor.pool).update(lends_unassigned=False)
    request = GpuRequestFactory.create(project=org.project_a, flavor=flavor, gpu_count=4)
    assert request.status == RequestStatus.PENDING_APPROVAL
    assert request.blocker["code"] == "approval"
    assert request.blocker["message"] == (
        f"Waiting for a team lead to approve it: {request.needs_lead_approval_because}."
    )
    # Approved, it needs 2 GE more than the guarantee and nobody lends: the next blocker.
    approve_gpu_request(actor=org.lead_a, request=request)
    run_cycle()
    assert blocker_of(request)["code"] == "borrowing_limit"
    # Lent by a team of the cohort, it is admitted and nothing blocks it any more.
    QuotaFactory.create(team=org.team_b, flavor=flavor, guaranteed=4, limit=4)
    run_cycle()
    request.refresh_from_db()
    assert request.status == RequestStatus.ADMITTED and request.blocker == {}


@pytest.mark.usefixtures("usage")
def test_a_team_past_its_budget_awaits_approval_for_the_budget(org: Org, fleet: Fleet) -> None:
    Budget.objects.create(
        team=org.team_a,
        unit="money",
        amount=Decimal("5"),
        over_budget_policy=OverBudgetPolicy.APPROVAL,
    )
    request = GpuRequestFactory.create(project=org.project_a, flavor=fleet.l4_6g)
    assert request.status == RequestStatus.PENDING_APPROVAL
    assert request.blocker == {
        "code": "budget",
        "message": "The team's budget is used up this month, so a team lead must approve it.",
        "detail": {"reasons": ["the budget is used up this month"]},
    }


@pytest.mark.parametrize("path", ["native", "portable"])
def test_a_quiet_cycle_writes_no_blocker_again(
    org: Org, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if path == "portable":  # the ORM's bulk_update, as SQLite takes it
        monkeypatch.setattr(blockers, "connection", SimpleNamespace(vendor="other"))
    flavor = whole_pool(org, nodes=(4,), guaranteed=16, limit=16)
    submit(org, flavor, 4)
    waiting = submit(org, flavor, 2)
    snapshot = build_snapshot()
    planned = plan(snapshot, now=0.0)
    GpuRequest.objects.filter(pk=waiting.pk).update(blocker={})
    assert blockers.record_blockers(snapshot, planned) == 1
    assert blocker_of(waiting)["code"] == "capacity"
    assert blockers.record_blockers(snapshot, planned) == 0


def test_rows_sharing_few_blockers_each_store_their_own(org: Org) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the shared-value UPDATE is PostgreSQL's")
    flavor = whole_pool(org, nodes=(4,), guaranteed=16, limit=16)
    requests = [submit(org, flavor, 1) for _ in range(5)]
    GpuRequest.objects.filter(pk__in=[r.pk for r in requests]).update(blocker={"code": "old"})
    full = {"code": "capacity", "message": "Pool ü is full – 0 free", "detail": {"free_ge": 1.5}}
    quota = {"code": "team_quota", "message": "No quota.", "detail": {"pools": ["a", "b"]}}
    values = [full, quota, full, dict(quota), {}]  # the fourth equal to the second, not it
    rows = [(r.pk, value) for r, value in zip(requests, values, strict=True)]

    assert update_shared_json(GpuRequest, "blocker", rows, only_if_different=True) == 5
    assert [blocker_of(r) for r in requests] == values
    assert update_shared_json(GpuRequest, "blocker", rows, only_if_different=True) == 0

    rows[2] = (requests[2].pk, quota)
    assert update_shared_json(GpuRequest, "blocker", rows, only_if_different=True) == 1
    assert [blocker_of(r) for r in requests] == [full, quota, quota, quota, {}]
    assert update_shared_json(GpuRequest, "blocker", rows, only_if_different=False) == 5


# ----------------------------------------------------------------------------- where it shows


def test_the_api_shows_the_blocker_of_the_current_status_only(org: Org) -> None:
    flavor = whole_pool(org, nodes=(4,), guaranteed=16, limit=16)
    first, second = submit(org, flavor, 4), submit(org, flavor, 2)
    run_cycle()
    client = api_client(org.dev_a)
    body = client.get(reverse("gpu-request-detail", args=[second.pk])).json()
    assert body["blocker"]["code"] == "capacity"
    assert body["blocker"]["message"] == blocker_of(second)["message"]
    assert client.get(reverse("gpu-request-detail", args=[first.pk])).json()["blocker"] == {}
    # A blocker left from the queue is not shown once the request has moved on.
    GpuRequest.objects.filter(pk=second.pk).update(status=RequestStatus.CANCELLED)
    assert client.get(reverse("gpu-request-detail", args=[second.pk])).json()["blocker"] == {}


def test_the_schema_documents_the_blocker_and_its_codes(org: Org) -> None:
    schema = api_client(org.dev_a).get(reverse("schema"), {"format": "json"}).json()
    request = schema["components"]["schemas"]["GpuRequest"]["properties"]["blocker"]
    blocker = schema["components"]["schemas"][request["allOf"][0]["$ref"].rsplit("/", 1)[1]]
    assert request["readOnly"] is True
    code = blocker["properties"]["code"]
    enum = (
        schema["components"]["schemas"][code["$ref"].rsplit("/", 1)[1]]["enum"]
        if ("$ref" in code)
        else code["enum"]
    )
    assert set(enum) == {
        "approval",
        "budget",
        "team_quota",
        "borrowing_limit",
        "capacity",
        "fragmentation",
        "mig_layout",
        "host_resources",
        "node_health",
        "retry_backoff",
        "cluster",
    }


def test_the_request_page_says_what_blocks_it_in_one_sentence(org: Org) -> None:
    flavor = whole_pool(org, nodes=(4, 4), guaranteed=16, limit=16, cordoned=1)
    submit(org, flavor, 4)
    second = submit(org, flavor, 2)
    run_cycle()
    client = Client()
    client.force_login(org.dev_a)
    page = client.get(reverse("gpu-request-page", args=[second.pk])).content.decode()
    assert (
        '<p class="alert alert-warning py-2" data-testid="blocker" data-code="node_health">'
        "The capacity it needs is on nodes that take no work now (cordoned, held back or not "
        f"ready): {flavor.pool.slug}-node-1.</p>"
    ) in page
