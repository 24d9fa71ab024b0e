"""Work kube-scheduler placed on another node than the engine planned is booked there on
instances nothing else holds, so the next snapshot neither loses it nor counts a slice twice."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.cluster.base import WorkloadStatus
from runtime.cluster.simulated import SimulatedCluster
from runtime.services import execution
from scheduling.choices import RequestStatus
from scheduling.engine.types import mig_layout_starts
from scheduling.models import Allocation, GpuDevice, GpuRequest, Node, NodePool
from scheduling.selectors.snapshot import build_snapshot
from scheduling.services import cycle
from scheduling.services.requests import GpuRequestSpec, approve_gpu_request, submit_gpu_request
from tests.scheduling.conftest import Fleet
from tests.support.personas import Org

pytestmark = pytest.mark.django_db
SLOW = SimulatedCluster(speed=0.001)


def admitted_mig_requests(org: Org, fleet: Fleet, count: int, capture: Any) -> list[GpuRequest]:
    requests = []
    for _ in range(count):
        request = submit_gpu_request(
            actor=org.dev_a,
            spec=GpuRequestSpec(
                project=org.project_a,
                flavor=fleet.mig_1g,
                gpu_count=1,
                image="vllm:0.6",
                max_runtime_seconds=3600,
            ),
        )
        if request.status == RequestStatus.PENDING_APPROVAL:
            approve_gpu_request(actor=org.lead_a, request=request)
        requests.append(request)
    admitted: list[tuple[int, int]] = []
    with capture(execute=True):
        cycle.run_cycle(on_admit=lambda r, a: admitted.append((r, a)))
    for request_id, attempt in admitted:
        execution.launch_request(request_id=request_id, attempt=attempt, backend=SLOW)
    assert len(admitted) == count
    for request in requests:
        request.refresh_from_db()
    return requests


def test_claims_moved_to_the_node_kube_scheduler_chose_take_free_instances_there(
    org: Org, fleet: Fleet, django_capture_on_commit_callbacks: Any
) -> None:
    pool = NodePool.objects.get(slug="h100-mig")
    assert pool.placement == "cluster"
    requests = admitted_mig_requests(org, fleet, 3, django_capture_on_commit_callbacks)
    assert {a.node_name for a in Allocation.objects.active()} == {"h100-mig-1"}
    # A node that joined after the cycle: kube-scheduler puts the pods there.
    other = Node.objects.create(pool=pool, name="h100-mig-2", gpu_model="H100-80G")
    for index in range(2):
        GpuDevice.objects.create(
            node=other, index=index, memory_mib=81920, mig_layout={"1g.10gb": 2}
        )
    for request in requests:
        status = WorkloadStatus(
            request_id=str(request.pk),
            attempt=request.attempt,
            phase="running",
            namespace=request.project.namespace,
            name=f"gpr-{request.pk}-a{request.attempt}",
            node_name="h100-mig-2",
        )
        assert execution.reconcile_placement(request, status)
    places = [
        (c["node"], c["device_index"], c["mig_start"])
        for a in Allocation.objects.active()
        for c in a.claims
    ]
    assert len(set(places)) == 3, "no instance is booked twice"
    starts = mig_layout_starts((("1g.10gb", 2),))["1g.10gb"]
    assert all(node == "h100-mig-2" and start in starts for node, _, start in places)
    # The engine now sees one instance left on h100-mig-2 and h100-mig-1 free again.
    free = {
        (d.node_id, d.index): d.mig_free.get("1g.10gb", 0)
        for d in build_snapshot().devices
        if d.node_id.startswith("h100")
    }
    assert sum(n for (node, _), n in free.items() if node == "h100-mig-2") == 1
    assert sum(n for (node, _), n in free.items() if node == "h100-mig-1") == 28
