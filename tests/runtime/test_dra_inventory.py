"""Inventory of a DRA pool: nodes count the GPUs of their ResourceSlices, not nvidia.com/gpu."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError

from runtime.cluster.base import NodeInventory
from runtime.cluster.simulated import SimulatedCluster
from runtime.cluster.specs import RESUMABLE_KINDS
from runtime.models import SimulatedWorkload
from runtime.services import execution
from runtime.services.inventory import apply_inventory
from scheduling.choices import DeviceAllocation, RequestStatus
from scheduling.models import Allocation, GpuDevice, GpuRequest, Node, NodePool
from scheduling.services import cycle
from tests.scheduling.conftest import Fleet
from tests.support.factories import GpuRequestFactory
from tests.support.personas import Org
from tests.support.polling import wait_until

pytestmark = pytest.mark.django_db


def dra_node(name: str, *, dra_gpu_count: int) -> NodeInventory:
    return NodeInventory(
        name=name,
        labels={"gpu-portal/pool": "a100-training"},
        taints=(),
        ready=True,
        schedulable=True,
        allocatable={"cpu": "64"},
        capacity={"cpu": "64"},
        gpu_model="NVIDIA-A100-SXM4-80GB",
        gpu_count=dra_gpu_count,
        gpu_memory_mib=81920,
        dra_gpu_count=dra_gpu_count,
    )


def test_a_dra_pools_node_takes_work_with_the_gpus_of_its_slices(fleet: Fleet) -> None:
    NodePool.objects.filter(slug="a100-training").update(allocation=DeviceAllocation.DRA)
    apply_inventory([dra_node("dra-1", dra_gpu_count=4)])
    node = Node.objects.get(name="dra-1")
    assert (node.gpu_model, node.held_back_reason) == ("A100-80G", "")
    assert GpuDevice.objects.filter(node=node).count() == 4


def test_a_device_plugin_pool_holds_back_a_node_with_only_dra_gpus(fleet: Fleet) -> None:
    apply_inventory([dra_node("dra-1", dra_gpu_count=4)])
    assert "nvidia.com/gpu" in Node.objects.get(name="dra-1").held_back_reason


def test_the_simulated_cluster_reports_a_dra_pools_cards_as_slices(fleet: Fleet) -> None:
    NodePool.objects.filter(slug="a100-training").update(allocation=DeviceAllocation.DRA)
    reported = {n.name: n for n in SimulatedCluster().sync_inventory()}
    a100 = reported["a100-training-1"]
    gpu_resources = {k for k in a100.allocatable if k.startswith("nvidia.com/")}
    assert (a100.dra_gpu_count, gpu_resources) == (8, set())
    apply_inventory(list(reported.values()))
    assert Node.objects.get(name="a100-training-1").held_back_reason == ""


def test_a_dra_pool_gives_whole_cards_only(fleet: Fleet) -> None:
    pool = NodePool.objects.get(slug="l4-vgpu")
    pool.allocation = DeviceAllocation.DRA
    with pytest.raises(ValidationError, match="whole cards only"):
        pool.full_clean()


def test_a_dra_pools_request_runs_on_the_simulated_cluster_with_the_engines_cards(
    org: Org, fleet: Fleet, django_capture_on_commit_callbacks: Any
) -> None:
    NodePool.objects.filter(slug="a100-training").update(allocation=DeviceAllocation.DRA)
    apply_inventory(SimulatedCluster().sync_inventory())
    request = GpuRequestFactory.create(
        to="queued", project=org.project_a, flavor=fleet.a100, gpu_count=2
    )
    admitted: list[tuple[int, int]] = []
    with django_capture_on_commit_callbacks(execute=True):
        cycle.run_cycle(on_admit=lambda r, a: admitted.append((r, a)))
    assert admitted == [(request.pk, 1)]
    allocation = Allocation.objects.get(request=request)
    spec = execution.workload_spec(
        GpuRequest.objects.select_related("flavor__pool", "project__team", "team", "owner").get(
            pk=request.pk
        ),
        allocation,
    )
    assert spec.allocation == "dra"
    assert (spec.node_name, sorted(spec.device_indexes)) == (
        allocation.node_name,
        sorted(claim["device_index"] for claim in allocation.claims),
    )
    backend = SimulatedCluster(speed=100_000)
    execution.launch_request(request_id=request.pk, attempt=1, backend=backend)
    workload = SimulatedWorkload.objects.get()
    assert workload.node_name == allocation.node_name  # on the node the engine chose
    # A job ends by itself, failing when the simulation drew a failure at launch; other kinds
    # run until the portal stops them.
    if workload.kind not in RESUMABLE_KINDS:
        expected = RequestStatus.FAILED if workload.fails else RequestStatus.SUCCEEDED
    else:
        expected = RequestStatus.RUNNING

    def reached() -> bool:
        execution.sync_workloads(backend=backend)
        request.refresh_from_db()
        return request.status == expected

    wait_until(reached, timeout=10, what=f"request {request.pk} is {expected.label}")
