"""A pool marked `allocation=dra` on a real control plane: its GPUs come from the ResourceSlices
of the (stand-in) DRA driver, a request compiles to a ResourceClaimTemplate, kube-scheduler
allocates exactly the cards the engine chose, and the template goes with the request."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth import get_user_model

from runtime.cluster import dra_manifests
from runtime.cluster.kubernetes import KubernetesClusterBackend
from runtime.services import execution
from runtime.services.inventory import apply_inventory
from scheduling.choices import DeviceAllocation, FlavorKind, RequestStatus, SharingMode
from scheduling.demo import seed_demo_fleet
from scheduling.models import Allocation, Flavor, Node, NodePool, Quota, Tier
from scheduling.services import cycle
from scheduling.services.requests import GpuRequestSpec, approve_gpu_request, submit_gpu_request
from scripts.testbed.cluster import GPU_TAINT, NodeShape, Testbed, missing_binaries
from scripts.testbed.cluster import TestbedError as BedError
from scripts.testbed.dra import DraCards
from tenants.models import Project
from tenants.services.organisation import seed_demo_organisation
from tests.k8s.conftest import eventually

pytestmark = [pytest.mark.k8s]

NODE = "dra-a100-1"
POOL = "dra-a100"
PRODUCT = "NVIDIA A100-SXM4-80GB"


@pytest.fixture(scope="module")
def dra_bed() -> Iterator[Testbed]:
    """A control plane of its own with one kwok node whose 4 A100s are published as DRA
    devices (no nvidia.com/gpu), apart from the session's shared bed."""
    if os.environ.get("K8S_TESTBED") != "1":
        pytest.skip("the Kubernetes test bed is off: set K8S_TESTBED=1 (binaries: make testbed)")
    missing = missing_binaries()
    if missing:
        message = f"test-bed binaries missing: {', '.join(missing)} (make testbed)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    bed = Testbed()
    try:
        bed.start(
            nodes=[
                NodeShape(name=NODE, pool=POOL, resources={}, dra_cards=DraCards(4, PRODUCT, 80))
            ]
        )
    except BedError as exc:
        bed.stop()
        pytest.fail(f"the DRA test bed did not start: {exc}")
    try:
        yield bed
    finally:
        bed.stop()


@pytest.fixture(scope="module")
def dra_backend(dra_bed: Testbed) -> KubernetesClusterBackend:
    """The portal's backend as the least-privilege `gpu-portal` user."""
    return KubernetesClusterBackend(kubeconfig=str(dra_bed.portal_kubeconfig))


def objects(bed: Testbed) -> Any:
    from kubernetes import client as k8s

    return k8s.CustomObjectsApi(bed.api_client())


def test_inventory_reads_a_dra_nodes_gpus_from_its_resource_slices(
    dra_backend: KubernetesClusterBackend,
) -> None:
    (node,) = [n for n in dra_backend.sync_inventory() if n.name == NODE]
    assert "nvidia.com/gpu" not in node.allocatable
    assert (node.dra_gpu_count, node.gpu_count) == (4, 4)
    assert node.gpu_model == "NVIDIA-A100-SXM4-80GB"
    assert node.gpu_memory_mib == 80 * 1024


@pytest.mark.django_db
def test_a_dra_pool_request_runs_on_the_cards_the_engine_chose(
    dra_bed: Testbed,
    dra_backend: KubernetesClusterBackend,
    django_capture_on_commit_callbacks: Any,
) -> None:
    teams = seed_demo_organisation(password="x")
    seed_demo_fleet(teams=teams)
    pool = NodePool.objects.create(
        name="DRA A100",
        slug=POOL,
        tier=Tier.objects.get(slug="training"),
        sharing_mode=SharingMode.EXCLUSIVE,
        allocation=DeviceAllocation.DRA,
        node_selector={"gpu-portal/pool": POOL},
        taints=[GPU_TAINT],
    )
    flavor = Flavor.objects.create(
        name="A100 80 GB (DRA)",
        slug="dra-a100-80g",
        pool=pool,
        kind=FlavorKind.WHOLE,
        gpu_model="A100-80G",
        gpu_memory_mib=81920,
        gpu_equivalent=Decimal(1),
    )
    Quota.objects.create(team=teams["vision"], project=None, flavor=flavor, guaranteed=4, limit=4)
    # 1. Inventory: the node's cards, from the slices, in the DRA pool and not held back.
    apply_inventory(dra_backend.sync_inventory())
    node = Node.objects.get(name=NODE)
    assert (node.pool_id, node.gpu_model, node.held_back_reason) == (pool.pk, "A100-80G", "")
    assert node.devices.count() == 4
    project = Project.objects.create(
        team=teams["vision"], slug=f"d{uuid.uuid4().hex[:8]}", name="DRA"
    )
    users = get_user_model().objects
    request = submit_gpu_request(
        actor=users.get(username="alice"),
        spec=GpuRequestSpec(
            project=project,
            flavor=flavor,
            gpu_count=2,
            image="registry.example.com/ml/train:1.0",
            command=["python", "train.py"],
            max_runtime_seconds=3600,
        ),
    )
    if request.status == RequestStatus.PENDING_APPROVAL:
        approve_gpu_request(actor=users.get(username="bob"), request=request)
    custom = objects(dra_bed)
    namespace = project.namespace
    try:
        # 2. The engine places it; the launch creates the claim template, then the Job.
        with django_capture_on_commit_callbacks(execute=True):
            assert cycle.run_cycle().admitted == [request.pk]
        allocation = Allocation.objects.get(request=request)
        chosen = sorted((claim["node"], claim["device_index"]) for claim in allocation.claims)
        assert len(chosen) == 2 and {n for n, _ in chosen} == {NODE}
        name = execution.launch_request(request_id=request.pk, attempt=1, backend=dra_backend)
        template = custom.get_namespaced_custom_object(
            "resource.k8s.io", "v1", namespace, "resourceclaimtemplates", name
        )
        exactly = template["spec"]["spec"]["devices"]["requests"][0]["exactly"]
        assert (exactly["deviceClassName"], exactly["count"]) == (dra_manifests.DEVICE_CLASS, 2)

        # 3. kube-scheduler allocated the claim made from it: exactly the engine's cards.
        def allocated() -> list[tuple[str, int]]:
            claims = custom.list_namespaced_custom_object(
                "resource.k8s.io", "v1", namespace, "resourceclaims"
            )["items"]
            return sorted(
                (result["pool"], int(result["device"].removeprefix("gpu-")))
                for claim in claims
                for result in ((claim.get("status") or {}).get("allocation") or {})
                .get("devices", {})
                .get("results", [])
            )

        assert eventually(allocated, what="the claim allocated") == chosen

        # 4. The pod ran and the request finished.
        def finished() -> bool:
            execution.sync_workloads(backend=dra_backend)
            request.refresh_from_db()
            return request.status in (RequestStatus.SUCCEEDED, RequestStatus.FAILED)

        eventually(finished, what="the request finished")
        assert request.status == RequestStatus.SUCCEEDED
        allocation.refresh_from_db()
        assert sorted((c["node"], c["device_index"]) for c in allocation.claims) == chosen

        # 5. Removing the finished work (the reclaim pass's cleanup) takes the template too.
        execution.terminate_request_workload(
            request_id=request.pk, attempt=1, reason="finished", backend=dra_backend
        )
        remaining = custom.list_namespaced_custom_object(
            "resource.k8s.io", "v1", namespace, "resourceclaimtemplates"
        )["items"]
        assert remaining == []
    finally:
        from kubernetes import client as k8s

        k8s.CoreV1Api(dra_bed.api_client()).delete_namespace(namespace, _preload_content=False)
