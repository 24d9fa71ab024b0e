"""The engine's placement reaches the real cluster, and the cluster's answer reaches the portal.

- A 4-card job on a pool of three 2-card nodes runs as a gang of 2 nodes x 2 GPUs: one
  indexed Job and a headless Service, every pod bound by kube-scheduler to one of the engine's
  nodes (one rank each), with torchrun's env; when one rank fails, the Job fails, the Job
  controller stops the other rank, and the portal runs the whole gang again as attempt 2.
- MIG: the engine admits only the 1g.10gb instances the H100 node advertises (28), the cluster
  binds all 28, and a 29th pod is Unschedulable.
- vGPU: the pod asks HAMi for the engine's card by UUID; HAMi's answer (its allocation
  annotation) moves the allocation's claim to the card HAMi chose.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth import get_user_model

from runtime.cluster.names import COMPLETION_INDEX_ANNOTATION
from runtime.services import execution
from runtime.services.inventory import apply_inventory
from scheduling.choices import FlavorKind, RequestStatus, SharingMode
from scheduling.demo import GPU_TAINT, seed_demo_fleet
from scheduling.models import Allocation, Flavor, GpuRequest, NodePool, Quota
from scheduling.services import cycle
from scheduling.services.lifecycle import transition
from scripts.testbed.cluster import whole_card_node
from tenants.models import AuditEvent, Project
from tenants.services.organisation import seed_demo_organisation
from tests.k8s.conftest import Admin, eventually
from tests.k8s.helpers import FAIL_LABEL, FAIL_PREFIX, runs_for
from tests.k8s.test_portal_end_to_end import LongRunning
from tests.support.factories import GpuRequestFactory

pytestmark = [pytest.mark.k8s, pytest.mark.django_db]
GANG_POOL = "gang-test"
GANG_NODES = [f"{GANG_POOL}-{i}" for i in (1, 2, 3)]


@pytest.fixture(scope="module")
def gang_nodes(k8s_testbed: Any) -> list[str]:
    """Three 2-card A100 nodes of a pool of their own, so no other test's pods take part."""
    k8s_testbed.add_nodes([whole_card_node(name, pool=GANG_POOL, gpus=2) for name in GANG_NODES])
    return GANG_NODES


@pytest.fixture
def portal(k8s_backend: Any, portal_priorities: None) -> Iterator[dict[str, Any]]:
    """The demo organisation and fleet, the portal's PriorityClasses, a project of its own."""
    teams = seed_demo_organisation(password="x")
    seed_demo_fleet(teams=teams)
    project = Project.objects.create(
        team=teams["vision"], slug=f"k{uuid.uuid4().hex[:8]}", name="Test bed"
    )
    users = get_user_model().objects
    yield {
        "teams": teams,
        "project": project,
        "dev": users.get(username="alice"),
        "lead": users.get(username="bob"),
    }


def submit(portal: dict[str, Any], flavor: Flavor, **fields: Any) -> GpuRequest:
    return GpuRequestFactory.create(
        project=portal["project"], flavor=flavor, actor=portal["dev"], to="queued", **fields
    )


def admit(capture: Any) -> list[tuple[int, int]]:
    admitted: list[tuple[int, int]] = []
    with capture(execute=True):
        cycle.run_cycle(on_admit=lambda r, a: admitted.append((r, a)))
    return admitted


def pods_of(admin: Admin, namespace: str, request: GpuRequest) -> list[Any]:
    return list(
        admin.core.list_namespaced_pod(
            namespace, label_selector=f"gpu-portal/request={request.pk}"
        ).items
    )


def rank_of(pod: Any) -> int:
    return int(pod.metadata.labels[COMPLETION_INDEX_ANNOTATION])


def stop_gang(
    admin: Admin, backend: Any, request: GpuRequest, namespace: str, service: str, reason: str
) -> None:
    """What the termination task does to a requeued gang: its Job, pods and Service go."""
    execution.terminate_request_workload(
        request_id=request.pk, attempt=1, reason=reason, backend=backend
    )
    eventually(
        lambda: (
            not pods_of(admin, namespace, request)
            and not admin.batch.list_namespaced_job(namespace).items
        ),
        what="the gang gone",
    )
    services_left = admin.core.list_namespaced_service(namespace).items
    assert not [s for s in services_left if s.metadata.name == service]


def gang_flavor(portal: dict[str, Any]) -> Flavor:
    """A flavor of the gang nodes' pool, with a quota of 4 cards for the project's team."""
    a100 = NodePool.objects.get(slug="a100-training")
    pool = NodePool.objects.create(
        name="Gang test",
        slug=GANG_POOL,
        tier=a100.tier,
        sharing_mode=SharingMode.EXCLUSIVE,
        node_selector={"gpu-portal/pool": GANG_POOL},
        taints=[GPU_TAINT],
    )
    flavor = Flavor.objects.create(
        name="Gang A100",
        slug="gang-a100",
        pool=pool,
        kind=FlavorKind.WHOLE,
        gpu_model="A100-80G",
        gpu_memory_mib=81920,
        gpu_cores_percent=100,
        gpu_equivalent=Decimal(1),
    )
    Quota.objects.create(team=portal["teams"]["vision"], flavor=flavor, guaranteed=4, limit=4)
    return flavor


def test_a_two_node_gang_runs_as_one_indexed_job_and_restarts_whole_when_a_rank_fails(
    k8s_backend: Any,
    k8s_admin: Admin,
    gang_nodes: list[str],
    portal: dict[str, Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    flavor = gang_flavor(portal)
    apply_inventory(k8s_backend.sync_inventory())
    namespace = portal["project"].namespace
    request = submit(portal, flavor, gpu_count=4)
    related = ("project__team", "team", "flavor__pool", "owner")
    try:
        assert admit(django_capture_on_commit_callbacks) == [(request.pk, 1)]
        allocation = Allocation.objects.get(request=request)
        nodes = allocation.node_name.split(",")
        assert len(nodes) == 2 and set(nodes) <= set(gang_nodes), "2 nodes x 2 GPUs"
        # Keep the ranks running: the Job is created from the portal's spec with kwok's knob.
        spec = execution.workload_spec(
            GpuRequest.objects.select_related(*related).get(pk=request.pk), allocation
        )
        k8s_backend.ensure_project(execution.project_spec(request))
        request.refresh_from_db()
        transition(request, RequestStatus.LAUNCHING, actor=None, reason="t")
        k8s_backend.launch(replace(spec, extra_annotations=runs_for("1h")))

        def all_running() -> list[Any]:
            pods = pods_of(k8s_admin, namespace, request)
            running = [p for p in pods if p.status.phase == "Running"]
            return running if len(running) == 2 else []

        pods = eventually(all_running, what="two ranks running")
        by_rank = {rank_of(p): p for p in pods}
        assert sorted(by_rank) == [0, 1]
        assert sorted(p.spec.node_name for p in pods) == sorted(nodes), "one rank per node"
        master = f"{spec.name}-0.{spec.name}.{namespace}.svc"
        for rank, pod in by_rank.items():
            assert pod.spec.hostname == f"{spec.name}-{rank}"
            assert pod.spec.subdomain == spec.name
            assert pod.spec.containers[0].resources.limits["nvidia.com/gpu"] == "2"
            env = {e.name: e for e in pod.spec.containers[0].env}
            values = {name: e.value for name, e in env.items()}
            assert values["WORLD_SIZE"] == "4", "processes: 2 nodes x 2 GPUs"
            assert (values["PET_NNODES"], values["PET_NPROC_PER_NODE"]) == ("2", "2")
            assert values["MASTER_ADDR"] == values["PET_MASTER_ADDR"] == master
            assert values["PET_RDZV_ENDPOINT"] == f"{master}:29500"
            path = env["PET_NODE_RANK"].value_from.field_ref.field_path
            assert path == f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']"
            assert pod.metadata.annotations[COMPLETION_INDEX_ANNOTATION] == str(rank)
        service = k8s_admin.core.read_namespaced_service(spec.name, namespace)
        assert service.spec.cluster_ip == "None"
        (job,) = k8s_admin.batch.list_namespaced_job(namespace).items
        assert (job.metadata.name, job.spec.completion_mode) == (spec.name, "Indexed")
        assert job.spec.completions == job.spec.parallelism == 2

        execution.sync_workloads(backend=k8s_backend)
        request.refresh_from_db()
        assert request.status == RequestStatus.RUNNING

        # Rank 1 fails (kwok's container-failed stage).
        k8s_admin.core.patch_namespaced_pod(
            by_rank[1].metadata.name,
            namespace,
            {
                "metadata": {
                    "labels": {FAIL_LABEL: "true"},
                    "annotations": {
                        f"{FAIL_PREFIX}exit-code": "3",
                        f"{FAIL_PREFIX}reason": "Error",
                    },
                }
            },
        )
        failed = eventually(
            lambda: (
                (s := k8s_backend.get_workload(namespace, str(request.pk), 1)).phase == "failed"
                and s
            ),
            what="the gang failed",
        )
        assert failed.exit_code == 3 and failed.message.startswith("rank 1 on")
        # The Job controller stops rank 0 itself: no rank runs on alone.
        eventually(
            lambda: (
                not [
                    p
                    for p in pods_of(k8s_admin, namespace, request)
                    if p.status.phase == "Running" and not p.metadata.deletion_timestamp
                ]
            ),
            what="rank 0 stopped by the Job controller",
        )
        with django_capture_on_commit_callbacks(execute=False):
            assert execution.sync_workloads(backend=k8s_backend) == {RequestStatus.QUEUED: 1}
        request.refresh_from_db()
        assert request.status == RequestStatus.QUEUED
        assert "rank 1 on" in request.status_reason
        assert not Allocation.objects.active().filter(request=request).exists()
        stop_gang(k8s_admin, k8s_backend, request, namespace, spec.name, "gang member failed")

        # The whole gang runs again: attempt 2, every rank, to completion.
        assert admit(django_capture_on_commit_callbacks) == [(request.pk, 2)]
        execution.launch_request(request_id=request.pk, attempt=2, backend=k8s_backend)
        (job,) = k8s_admin.batch.list_namespaced_job(namespace).items
        assert job.metadata.name == f"gpr-{request.pk}-a2" and job.spec.completions == 2

        def finished() -> str:
            execution.sync_workloads(backend=k8s_backend)
            request.refresh_from_db()
            return request.status if request.status == RequestStatus.SUCCEEDED else ""

        with django_capture_on_commit_callbacks(execute=False):
            eventually(finished, what="attempt 2 succeeded")
        ranks = pods_of(k8s_admin, namespace, request)
        assert sorted(rank_of(p) for p in ranks) == [0, 1]
        assert {p.metadata.labels["gpu-portal/attempt"] for p in ranks} == {"2"}
        assert len({p.spec.node_name for p in ranks}) == 2
    finally:
        k8s_admin.core.delete_namespace(namespace, _preload_content=False)


def test_a_gang_with_a_rank_no_node_takes_is_stopped_and_requeued_after_the_timeout(
    k8s_backend: Any,
    k8s_admin: Admin,
    gang_nodes: list[str],
    portal: dict[str, Any],
    django_capture_on_commit_callbacks: Any,
    settings: Any,
) -> None:
    settings.GANG_READY_TIMEOUT_SECONDS = 3
    flavor = gang_flavor(portal)
    apply_inventory(k8s_backend.sync_inventory())
    namespace = portal["project"].namespace
    request = submit(portal, flavor, gpu_count=4)
    assert admit(django_capture_on_commit_callbacks) == [(request.pk, 1)]
    nodes = Allocation.objects.get(request=request).node_name.split(",")
    # After the engine chose it, one of the gang's nodes stops taking pods.
    k8s_admin.core.patch_node(nodes[1], {"spec": {"unschedulable": True}})
    try:
        # The placed rank keeps running (kwok would complete it in a second or two).
        execution.launch_request(request_id=request.pk, attempt=1, backend=LongRunning(k8s_backend))
        request.refresh_from_db()
        assert request.status == RequestStatus.LAUNCHING
        name = f"gpr-{request.pk}-a1"

        def unschedulable() -> list[Any]:
            return [
                p
                for p in pods_of(k8s_admin, namespace, request)
                if any(
                    c.type == "PodScheduled" and c.reason == "Unschedulable"
                    for c in p.status.conditions or ()
                )
            ]

        (stuck,) = eventually(unschedulable, what="one rank unschedulable")
        bound = [p for p in pods_of(k8s_admin, namespace, request) if p.spec.node_name]
        assert [p.spec.node_name for p in bound] == [nodes[0]], "the other rank holds its node"

        def requeued() -> str:
            execution.sync_workloads(backend=k8s_backend)
            request.refresh_from_db()
            return request.status if request.status != RequestStatus.LAUNCHING else ""

        with django_capture_on_commit_callbacks(execute=False):
            assert eventually(requeued, timeout=30, what="the gang requeued") == (
                RequestStatus.QUEUED
            )
        assert not Allocation.objects.active().filter(request=request).exists()
        prefix = f"Requeued: rank {rank_of(stuck)} of 2 could not be scheduled within 3 s: 0/"
        assert request.status_reason.startswith(prefix), request.status_reason
        assert request.status_reason.endswith("; the gang was stopped and requeued")
        event = AuditEvent.objects.get(target_id=str(request.pk), action="gang.not_ready")
        assert "nodes are available" in event.message
        stop_gang(k8s_admin, k8s_backend, request, namespace, name, "gang not ready in time")
    finally:
        k8s_admin.core.patch_node(nodes[1], {"spec": {"unschedulable": False}})
        k8s_admin.core.delete_namespace(namespace, _preload_content=False)


def test_mig_admissions_never_exceed_the_instances_the_node_advertises(
    k8s_backend: Any,
    k8s_admin: Admin,
    portal: dict[str, Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    apply_inventory(k8s_backend.sync_inventory())
    mig_1g = Flavor.objects.get(slug="h100-1g10gb")
    Quota.objects.filter(team=portal["teams"]["vision"], flavor=mig_1g).update(
        guaranteed=40, limit=40
    )
    namespace = portal["project"].namespace
    requests = [submit(portal, mig_1g) for _ in range(32)]
    try:
        admitted = admit(django_capture_on_commit_callbacks)
        assert len(admitted) == 28, "the node advertises 28 nvidia.com/mig-1g.10gb"
        waiting = GpuRequest.objects.filter(pk__in=[r.pk for r in requests], status="queued")
        assert waiting.count() == 4
        k8s_backend.ensure_priority_classes(list(execution.PRIORITY_CLASSES.values()))
        k8s_backend.ensure_project(execution.project_spec(requests[0]))
        related = ("project__team", "team", "flavor__pool", "owner")
        specs = []
        for request_id, attempt in admitted:
            request = GpuRequest.objects.select_related(*related).get(pk=request_id)
            allocation = Allocation.objects.get(request=request, attempt=attempt)
            specs.append(execution.workload_spec(request, allocation))
        for spec in specs:
            k8s_backend.launch(replace(spec, extra_annotations=runs_for("1h")))

        def bound() -> list[Any]:
            pods = k8s_admin.core.list_namespaced_pod(namespace).items
            on_node = [p for p in pods if p.spec.node_name == "h100-mig-1"]
            return on_node if len(on_node) == 28 else []

        eventually(bound, timeout=120, what="all 28 admitted pods bound to h100-mig-1")
        # One more than the engine admitted: the cluster has no room for it either.
        extra = replace(specs[0], request_id=str(requests[0].pk + 100000), attempt=1)
        k8s_backend.launch(replace(extra, extra_annotations=runs_for("1h")))
        status = eventually(
            lambda: (
                (s := k8s_backend.get_workload(namespace, extra.request_id, 1)).reason
                == "Unschedulable"
                and s
            ),
            what="the 29th instance unschedulable",
        )
        assert "nvidia.com/mig-1g.10gb" in status.message
    finally:
        k8s_admin.core.delete_namespace(namespace, _preload_content=False)


def test_a_vgpu_pod_carries_the_engine_card_and_follows_hamis_answer(
    k8s_backend: Any,
    k8s_admin: Admin,
    portal: dict[str, Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    # The test bed has no HAMi scheduler: kube-scheduler binds the pod, the test plays HAMi.
    NodePool.objects.filter(slug="l4-vgpu").update(scheduler_name="default-scheduler")
    apply_inventory(k8s_backend.sync_inventory())
    namespace = portal["project"].namespace
    request = submit(portal, Flavor.objects.get(slug="l4-6g"))
    try:
        assert admit(django_capture_on_commit_callbacks) == [(request.pk, 1)]
        allocation = Allocation.objects.get(request=request)
        (claim,) = allocation.claims
        execution.launch_request(request_id=request.pk, attempt=1, backend=k8s_backend)
        (pod,) = eventually(
            lambda: [p for p in pods_of(k8s_admin, namespace, request) if p.spec.node_name],
            what="the vGPU pod bound",
        )
        assert pod.spec.node_name == claim["node"]
        annotations = pod.metadata.annotations
        assert annotations["nvidia.com/use-gpuuuid"] == f"GPU-testbed-{claim['device_index']}"
        assert annotations["nvidia.com/use-gputype"] == "NVIDIA-NVIDIA L4"

        other = (claim["device_index"] + 2) % 4
        k8s_admin.core.patch_namespaced_pod(
            pod.metadata.name,
            namespace,
            {
                "metadata": {
                    "annotations": {
                        "hami.io/vgpu-devices-allocated": f"GPU-testbed-{other},NVIDIA,6144,25:;",
                        "hami.io/vgpu-devices-to-allocate": ";",
                        "hami.io/vgpu-node": claim["node"],
                    }
                }
            },
        )
        execution.sync_workloads(backend=k8s_backend)
        allocation.refresh_from_db()
        assert allocation.claims == [{**claim, "device_index": other}]
        assert AuditEvent.objects.filter(action="allocation.reconciled").exists()
    finally:
        k8s_admin.core.delete_namespace(namespace, _preload_content=False)
