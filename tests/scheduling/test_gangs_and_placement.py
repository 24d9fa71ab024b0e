"""What the engine decides reaches the cluster, and what the cluster decides reaches the
allocation: gangs over several nodes, MIG layouts, HAMi's cards and the node kube-scheduler
chose (simulated cluster, the demo fleet)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from runtime.cluster.base import GangMember, WorkloadStatus
from runtime.cluster.simulated import SimulatedCluster
from runtime.models import SimulatedWorkload
from runtime.services import execution
from scheduling.choices import RequestStatus
from scheduling.engine import planner
from scheduling.engine.types import Quota, Request
from scheduling.models import Allocation, GpuRequest, Node, NodePool, ReclaimPolicy
from scheduling.selectors.snapshot import build_snapshot
from scheduling.services import cycle
from scheduling.services.quotas import set_quota
from tenants.models import AuditEvent
from tests.scheduling.conftest import Fleet
from tests.support.factories import GpuRequestFactory
from tests.support.personas import Org

pytestmark = pytest.mark.django_db
FAST = SimulatedCluster(speed=100_000)
SLOW = SimulatedCluster(speed=0.001)  # starts after hours: stays launching


@pytest.fixture
def admit(django_capture_on_commit_callbacks: Any) -> Callable[..., list[tuple[int, int]]]:
    """One cycle, then the launches it queued on `backend`."""

    def run(backend: SimulatedCluster = FAST) -> list[tuple[int, int]]:
        admitted: list[tuple[int, int]] = []
        with django_capture_on_commit_callbacks(execute=True):
            cycle.run_cycle(on_admit=lambda r, a: admitted.append((r, a)))
        for request_id, attempt in admitted:
            execution.launch_request(request_id=request_id, attempt=attempt, backend=backend)
        return admitted

    return run


def gang_request(org: Org, fleet: Fleet) -> GpuRequest:
    set_quota(actor=org.admin, team=org.team_a, flavor=fleet.a100, guaranteed=16, limit=32)
    return GpuRequestFactory.create(
        to="queued", project=org.project_a, flavor=fleet.a100, gpu_count=16
    )


def test_a_16_card_job_runs_as_one_pinned_workload_per_node(
    org: Org, fleet: Fleet, admit: Callable[..., list[tuple[int, int]]]
) -> None:
    request = gang_request(org, fleet)
    assert admit() == [(request.pk, 1)]
    allocation = Allocation.objects.get(request=request)
    nodes = allocation.node_name.split(",")
    assert len(nodes) == 2
    spec = execution.workload_spec(
        GpuRequest.objects.select_related("flavor__pool", "project__team", "team", "owner").get(
            pk=request.pk
        ),
        allocation,
    )
    assert spec.gang == tuple(GangMember(node, 8) for node in nodes)
    assert spec.node_selector == {"gpu-portal/pool": allocation.pool.slug}  # as inventory
    ranks = SimulatedWorkload.objects.order_by("name")
    assert [(w.name, w.node_name) for w in ranks] == [
        (f"gpr-{request.pk}-a1-r{rank}", node) for rank, node in enumerate(nodes)
    ]
    status = FAST.get_workload(request.project.namespace, str(request.pk), 1)
    assert (status.gang_size, status.node_names, status.name) == (
        2,
        tuple(nodes),
        ranks[0].name[:-3],
    )


def fail_rank(request: GpuRequest, rank: int) -> None:
    SimulatedWorkload.objects.filter(name=f"gpr-{request.pk}-a{request.attempt}-r{rank}").update(
        fails=True, failure_reason="Error", ends_at=timezone.now() - timedelta(seconds=1)
    )


def test_a_failed_rank_stops_the_whole_gang_and_requeues_it_with_its_age(
    org: Org,
    fleet: Fleet,
    admit: Callable[..., list[tuple[int, int]]],
    django_capture_on_commit_callbacks: Any,
) -> None:
    request = gang_request(org, fleet)
    admit(SLOW)
    SimulatedWorkload.objects.update(starts_at=timezone.now() - timedelta(seconds=5))
    execution.sync_workloads(backend=SLOW)
    request.refresh_from_db()
    assert request.status == RequestStatus.RUNNING
    fail_rank(request, 1)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        assert execution.sync_workloads(backend=SLOW) == {RequestStatus.QUEUED: 1}
    request.refresh_from_db()
    assert request.status == RequestStatus.QUEUED and request.attempt == 1
    assert not Allocation.objects.active().filter(request=request).exists()
    assert callbacks, "the termination of every rank was dispatched"
    event = AuditEvent.objects.get(action="gang.member_failed")
    assert "rank 1 on" in event.message and "the whole gang was stopped" in event.message
    # Its age is kept: the engine still sees the original submission time.
    (pending,) = [r for r in build_snapshot().pending if r.id == str(request.pk)]
    assert pending.submitted_at == request.created_at.timestamp()


def test_a_gang_that_used_its_attempts_fails(
    org: Org, fleet: Fleet, admit: Callable[..., list[tuple[int, int]]]
) -> None:
    ReclaimPolicy.objects.update_or_create(tier=fleet.a100.pool.tier, defaults={"max_attempts": 1})
    request = gang_request(org, fleet)
    admit(SLOW)
    request.refresh_from_db()
    fail_rank(request, 0)
    SimulatedWorkload.objects.update(starts_at=timezone.now() - timedelta(seconds=5))
    execution.sync_workloads(backend=SLOW)
    request.refresh_from_db()
    assert request.status == RequestStatus.FAILED
    assert "gave up after 1 attempts" in request.status_reason


def test_the_demo_h100_never_admits_more_1g_instances_than_its_cards_offer(
    org: Org, fleet: Fleet
) -> None:
    snap = build_snapshot()
    layouts = Counter(
        (p, n) for d in snap.devices if d.node_id.startswith("h100") for p, n in d.mig_layout
    )
    assert layouts == {("1g.10gb", 7): 4, ("3g.40gb", 2): 4}
    pending = tuple(
        Request(
            id=str(1000 + i),
            team=org.team_a.slug,
            flavor=fleet.mig_1g.slug,
            kind="job",
            submitted_at=i,
        )
        for i in range(60)
    )
    quotas = tuple(Quota(org.team_a.slug, f.id, 100.0, 100.0) for f in snap.flavors)
    plan = planner.plan(replace(snap, pending=pending, quotas=quotas), now=time.time())
    assert len(plan.admissions) == 28


def status_of(request: GpuRequest, **fields: Any) -> WorkloadStatus:
    return WorkloadStatus(
        request_id=str(request.pk),
        attempt=request.attempt,
        phase="running",
        namespace=request.project.namespace,
        name=f"gpr-{request.pk}-a{request.attempt}",
        **fields,
    )


def test_hami_cards_replace_the_engine_cards_in_the_allocation(
    org: Org, fleet: Fleet, admit: Callable[..., list[tuple[int, int]]]
) -> None:
    request = GpuRequestFactory.create(to="queued", project=org.project_a, flavor=fleet.l4_6g)
    admit(SLOW)
    request.refresh_from_db()
    allocation = Allocation.objects.get(request=request)
    (claim,) = allocation.claims
    other = (claim["device_index"] + 1) % 4
    status = status_of(
        request, node_name=claim["node"], gpu_uuids=("GPU-x",), device_indexes=(other,)
    )
    assert execution.reconcile_placement(request, status)
    allocation.refresh_from_db()
    assert allocation.claims == [{**claim, "device_index": other}]
    event = AuditEvent.objects.get(action="allocation.reconciled")
    assert event.data["from"] == [claim] and event.data["to"] == allocation.claims
    assert not execution.reconcile_placement(request, status), "a second run changes nothing"


def test_the_node_kube_scheduler_chose_moves_the_claims_in_a_cluster_placed_pool(
    org: Org, fleet: Fleet, admit: Callable[..., list[tuple[int, int]]]
) -> None:
    pool = NodePool.objects.get(slug="h100-mig")
    assert pool.placement == "cluster"
    Node.objects.create(pool=pool, name="h100-mig-2", gpu_model="H100-80G")
    request = GpuRequestFactory.create(to="queued", project=org.project_a, flavor=fleet.mig_1g)
    admit(SLOW)
    request.refresh_from_db()
    allocation = Allocation.objects.get(request=request)
    assert {c["node"] for c in allocation.claims} == {"h100-mig-1"}
    execution.apply_workload_status(request, status_of(request, node_name="h100-mig-2"))
    allocation.refresh_from_db()
    assert {c["node"] for c in allocation.claims} == {"h100-mig-2"}
    assert allocation.node_name == "h100-mig-2"
    request.refresh_from_db()
    assert request.status == RequestStatus.RUNNING


@pytest.mark.parametrize(
    ("kind", "flavor", "non_root"), [("notebook", "l4_12g", True), ("job", "a100", False)]
)
def test_the_workload_spec_carries_the_pod_security_settings(
    org: Org,
    fleet: Fleet,
    admit: Callable[..., list[tuple[int, int]]],
    settings: Any,
    kind: str,
    flavor: str,
    non_root: bool,
) -> None:
    settings.WORKLOAD_FS_GROUP = 100
    settings.WORKLOAD_NON_ROOT_KINDS = ["notebook"]
    chosen = getattr(fleet, flavor)
    set_quota(actor=org.admin, team=org.team_a, flavor=chosen, guaranteed=8, limit=8)
    request = GpuRequestFactory.create(
        to="queued", project=org.project_a, flavor=chosen, gpu_count=1, kind=kind
    )
    assert admit() == [(request.pk, 1)]
    spec = execution.workload_spec(
        GpuRequest.objects.select_related("flavor__pool", "project__team", "team", "owner").get(
            pk=request.pk
        ),
        Allocation.objects.get(request=request),
    )
    assert (spec.fs_group, spec.run_as_non_root) == (100, non_root)


def unplaced_rank_status(request: GpuRequest, node: str) -> WorkloadStatus:
    """What kube-scheduler reports of a gang whose rank 1 no node takes."""
    return WorkloadStatus(
        request_id=str(request.pk),
        attempt=request.attempt,
        phase="pending",
        namespace=request.project.namespace,
        name=f"gpr-{request.pk}-a{request.attempt}",
        kind="job",
        reason="Unschedulable",
        message="rank 1: 0/3 nodes are available: 1 node(s) were unschedulable.",
        node_name=node,
        gang_size=2,
        node_names=(node, ""),
    )


def test_a_gang_with_a_rank_not_placed_in_time_is_stopped_and_requeued(
    org: Org,
    fleet: Fleet,
    admit: Callable[..., list[tuple[int, int]]],
    django_capture_on_commit_callbacks: Any,
    settings: Any,
) -> None:
    settings.GANG_READY_TIMEOUT_SECONDS = 300
    request = gang_request(org, fleet)
    admit(SLOW)
    request.refresh_from_db()
    assert request.status == RequestStatus.LAUNCHING
    allocation = Allocation.objects.get(request=request)
    assert allocation.launched_at is not None
    status = unplaced_rank_status(request, allocation.node_name.split(",")[0])
    # Within the timeout it waits, saying why.
    Allocation.objects.filter(pk=allocation.pk).update(
        launched_at=timezone.now() - timedelta(seconds=290)
    )
    assert execution.apply_workload_status(request, status) is None
    request.refresh_from_db()
    assert request.status == RequestStatus.LAUNCHING
    assert Allocation.objects.active().filter(request=request).exists()
    # A repeated launch (it adopts the workload) keeps the first launch's time.
    execution.launch_request(request_id=request.pk, attempt=1, backend=SLOW)
    (kept,) = Allocation.objects.filter(pk=allocation.pk).values_list("launched_at", flat=True)
    assert kept is not None and kept < timezone.now() - timedelta(seconds=280)
    # Past it, the whole gang goes and the request is queued again with its age.
    Allocation.objects.filter(pk=allocation.pk).update(
        launched_at=timezone.now() - timedelta(seconds=301)
    )
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        assert execution.apply_workload_status(request, status) == RequestStatus.QUEUED
    request.refresh_from_db()
    assert request.status == RequestStatus.QUEUED and request.attempt == 1
    assert not Allocation.objects.active().filter(request=request).exists()
    assert callbacks, "the termination of every rank was dispatched"
    expected = (
        "rank 1 of 2 could not be scheduled within 300 s: 0/3 nodes are available: "
        "1 node(s) were unschedulable; the gang was stopped and requeued"
    )
    assert request.status_reason == f"Requeued: {expected}"
    assert AuditEvent.objects.get(action="gang.not_ready").message == expected


def test_a_gang_with_every_rank_placed_is_not_stopped_by_the_ready_timeout(
    org: Org, fleet: Fleet, admit: Callable[..., list[tuple[int, int]]], settings: Any
) -> None:
    settings.GANG_READY_TIMEOUT_SECONDS = 300
    request = gang_request(org, fleet)
    admit(SLOW)
    request.refresh_from_db()
    allocation = Allocation.objects.get(request=request)
    Allocation.objects.filter(pk=allocation.pk).update(
        launched_at=timezone.now() - timedelta(seconds=3600)
    )
    nodes = tuple(allocation.node_name.split(","))
    starting = replace(
        unplaced_rank_status(request, nodes[0]),
        reason="ContainerCreating",
        message=f"rank 1 on {nodes[1]}: ",
        node_names=nodes,
    )
    assert execution.apply_workload_status(request, starting) is None
    request.refresh_from_db()
    assert request.status == RequestStatus.LAUNCHING
    settings.GANG_READY_TIMEOUT_SECONDS = 0  # off: even an unplaced rank may wait
    assert execution.apply_workload_status(request, unplaced_rank_status(request, nodes[0])) is None
    request.refresh_from_db()
    assert request.status == RequestStatus.LAUNCHING
