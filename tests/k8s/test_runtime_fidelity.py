"""Decisions made after a launch reach the real cluster, and its answers reach the request.

- A lead's extension patches the running Job's `activeDeadlineSeconds`: the real Job
  controller lets it outlive its first deadline and stops it at the extended one, which the
  portal records as a timeout reclaim, not a failure.
- A pod kube-scheduler cannot place says so on the request (`waiting_reason`, its page).
- A quota change pushes the namespace ResourceQuota, every GPU resource included, with no launch.
- Inventory holds back a node that lacks its pool mode's resources, and takes GPUs held by
  pods the portal did not create out of what the engine sees free.

Each test brings its own node (and pool), so no other test's pods take part.
"""

from __future__ import annotations

import contextlib
import math
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from runtime.services import execution
from runtime.services.inventory import apply_inventory
from scheduling.choices import FlavorKind, RequestStatus, SharingMode
from scheduling.demo import GPU_TAINT, seed_demo_fleet
from scheduling.models import Allocation, Flavor, GpuRequest, Node, NodePool, Quota
from scheduling.selectors.snapshot import build_snapshot
from scheduling.services import cycle
from scheduling.services.governance import extend_runtime
from scheduling.services.quotas import set_quota
from scripts.testbed.cluster import NodeShape, whole_card_node
from tenants.models import AuditEvent, Project
from tenants.services.organisation import seed_demo_organisation
from tests.k8s.conftest import Admin, eventually
from tests.k8s.helpers import GPU_TOLERATION, runs_for
from tests.support.factories import GpuRequestFactory

pytestmark = [pytest.mark.k8s, pytest.mark.django_db]
DEADLINE_NODE = "rf-deadline-1"
WAIT_NODE = "rf-wait-1"
FOREIGN_NODE = "rf-foreign-1"
BARE_VGPU_NODE = "rf-bare-vgpu-1"


@pytest.fixture(scope="module")
def fidelity_nodes(k8s_testbed: Any, k8s_admin: Admin) -> Iterator[None]:
    """A whole-card node per test, in a pool named after it, and an L4 node in the demo vGPU
    pool that advertises whole cards only (no HAMi); all removed afterwards."""
    k8s_testbed.add_nodes(
        [
            whole_card_node(DEADLINE_NODE, pool=DEADLINE_NODE, gpus=1),
            whole_card_node(WAIT_NODE, pool=WAIT_NODE, gpus=2),
            whole_card_node(FOREIGN_NODE, pool=FOREIGN_NODE, gpus=4),
            NodeShape(
                name=BARE_VGPU_NODE,
                pool="l4-vgpu",
                resources={"nvidia.com/gpu": "4"},
                labels={"nvidia.com/gpu.product": "NVIDIA-L4", "nvidia.com/gpu.count": "4"},
            ),
        ]
    )
    yield
    for name in (DEADLINE_NODE, WAIT_NODE, FOREIGN_NODE, BARE_VGPU_NODE):
        with contextlib.suppress(Exception):
            k8s_admin.core.delete_node(name, _preload_content=False)


@pytest.fixture
def portal(
    k8s_backend: Any,
    k8s_admin: Admin,
    portal_priorities: None,
    fidelity_nodes: None,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[dict[str, Any]]:
    """The demo organisation and fleet, a project of its own, and the worker's tasks talking
    to the test bed (they run inline in tests)."""
    monkeypatch.setattr(execution, "cluster_backend", lambda: k8s_backend)
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
        "admin": users.get(username="root"),
    }
    with contextlib.suppress(Exception):
        k8s_admin.core.delete_namespace(project.namespace, _preload_content=False)


def own_pool(portal: dict[str, Any], node_pool: str, *, limit: int = 8) -> Flavor:
    """A whole-card A100 pool holding just `node_pool`'s node, its flavor and a team quota."""
    a100 = NodePool.objects.get(slug="a100-training")
    pool = NodePool.objects.create(
        name=node_pool,
        slug=node_pool,
        tier=a100.tier,
        sharing_mode=SharingMode.EXCLUSIVE,
        node_selector={"gpu-portal/pool": node_pool},
        taints=[GPU_TAINT],
    )
    flavor = Flavor.objects.create(
        name=f"{node_pool} A100",
        slug=f"{node_pool}-a100",
        pool=pool,
        kind=FlavorKind.WHOLE,
        gpu_model="A100-80G",
        gpu_memory_mib=81920,
        gpu_cores_percent=100,
        gpu_equivalent=Decimal(1),
    )
    Quota.objects.create(
        team=portal["teams"]["vision"], flavor=flavor, guaranteed=limit, limit=limit
    )
    return flavor


def submit(portal: dict[str, Any], flavor: Flavor, **fields: Any) -> GpuRequest:
    return GpuRequestFactory.create(
        project=portal["project"], flavor=flavor, actor=portal["dev"], to="queued", **fields
    )


def admit(capture: Any) -> list[tuple[int, int]]:
    admitted: list[tuple[int, int]] = []
    with capture(execute=True):
        cycle.run_cycle(on_admit=lambda r, a: admitted.append((r, a)))
    return admitted


def launch_running_for_an_hour(
    request: GpuRequest, backend: Any, monkeypatch: pytest.MonkeyPatch
) -> str:
    """`launch_request`, with kwok's knob keeping the pod running for an hour."""
    spec_of = execution.workload_spec
    monkeypatch.setattr(
        execution,
        "workload_spec",
        lambda *args: replace(spec_of(*args), extra_annotations=runs_for("1h")),
    )
    return execution.launch_request(request_id=request.pk, attempt=1, backend=backend)


def sync_until(request: GpuRequest, backend: Any, *statuses: str, timeout: float = 60.0) -> None:
    def reached() -> bool:
        execution.sync_workloads(backend=backend)
        request.refresh_from_db()
        return request.status in statuses

    eventually(reached, timeout=timeout, what=f"request {request.pk} in {statuses}")


def test_an_extended_job_outlives_its_first_deadline_and_ends_as_a_timeout_reclaim(
    k8s_backend: Any,
    k8s_admin: Admin,
    portal: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    flavor = own_pool(portal, DEADLINE_NODE)
    apply_inventory(k8s_backend.sync_inventory())
    namespace = portal["project"].namespace
    request = submit(portal, flavor, max_runtime_seconds=15)
    assert admit(django_capture_on_commit_callbacks) == [(request.pk, 1)]
    name = launch_running_for_an_hour(request, k8s_backend, monkeypatch)
    job = k8s_admin.batch.read_namespaced_job(name, namespace)
    # The launch leaves room to wait for a node (the tier's pending timeout).
    allowance = execution.start_allowance_seconds(flavor.pool)
    assert job.spec.active_deadline_seconds == 15 + allowance
    sync_until(request, k8s_backend, RequestStatus.RUNNING, timeout=12)

    # The lead extends it before the first deadline; the task patches the running Job: 40 s
    # from when its pod started running, which the Job controller counts from the Job's start.
    with django_capture_on_commit_callbacks(execute=True):
        extend_runtime(actor=portal["lead"], request=request, seconds=25)
    job = k8s_admin.batch.read_namespaced_job(name, namespace)
    running_since = Allocation.objects.get(request=request).started_at
    assert running_since is not None
    waited = math.ceil(max(0.0, (running_since - job.status.start_time).total_seconds()))
    assert waited <= 2
    assert job.spec.active_deadline_seconds == 40 + waited
    assert job.metadata.annotations["gpu-portal/max-runtime-seconds"] == "40"

    # Past the first deadline (15 s after the Job started, plus the controller's slack): the
    # real Job controller keeps it running, and so does the portal.
    started: datetime = job.status.start_time
    time.sleep(max(0.0, started.timestamp() + 22 - time.time()))
    job = k8s_admin.batch.read_namespaced_job(name, namespace)
    assert not [c for c in job.status.conditions or [] if c.status == "True"]
    execution.sync_workloads(backend=k8s_backend)
    request.refresh_from_db()
    assert request.status == RequestStatus.RUNNING

    # At the extended deadline the controller stops it, and the portal calls that a timeout.
    sync_until(request, k8s_backend, RequestStatus.RECLAIMED, RequestStatus.FAILED, timeout=45)
    assert request.status == RequestStatus.RECLAIMED
    assert request.status_reason.startswith("Stopped: it reached its max runtime")
    job = k8s_admin.batch.read_namespaced_job(name, namespace)
    # FailureTarget first (the controller then ends the pods), Failed once they are gone.
    failed = next(
        c
        for c in job.status.conditions
        if c.type in ("FailureTarget", "Failed") and c.status == "True"
    )
    assert failed.reason == "DeadlineExceeded"
    assert (failed.last_transition_time - started).total_seconds() >= 40
    event = AuditEvent.objects.get(action="reclaim.timeout", target_id=str(request.pk))
    assert event.data["max_runtime_seconds"] == 40
    assert Allocation.objects.get(request=request).end_reason == "reclaimed: timeout"


def test_an_unschedulable_reason_reaches_the_request_and_its_page(
    k8s_backend: Any,
    k8s_admin: Admin,
    portal: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    flavor = own_pool(portal, WAIT_NODE)
    apply_inventory(k8s_backend.sync_inventory())
    namespace = portal["project"].namespace
    request = submit(portal, flavor, gpu_count=2)
    assert admit(django_capture_on_commit_callbacks) == [(request.pk, 1)]
    assert Allocation.objects.get(request=request).node_name == WAIT_NODE
    # Another tenant of the cluster takes a card after the engine's decision.
    foreign_pod(k8s_admin, namespace, WAIT_NODE, gpus=1)
    launch_running_for_an_hour(request, k8s_backend, monkeypatch)

    def waiting() -> str:
        execution.sync_workloads(backend=k8s_backend)
        request.refresh_from_db()
        return request.waiting_reason

    reason = eventually(waiting, timeout=30, what="the scheduler's reason on the request")
    assert reason.startswith("Unschedulable: 0/")
    assert "Insufficient nvidia.com/gpu" in reason
    assert request.status == RequestStatus.LAUNCHING
    assert request.status_reason == "The cluster's scheduler cannot place it yet."
    client = Client()
    client.force_login(portal["dev"])
    page = client.get(reverse("gpu-request-page", args=[request.pk])).content.decode()
    assert "Insufficient nvidia.com/gpu" in page
    # The headline says why, once, not "Creating the workload." (which stays in the history).
    lead = 'data-code="cluster">The cluster&#x27;s scheduler cannot place it yet.</p>'
    assert lead in page


def test_a_quota_change_pushes_every_gpu_resource_to_the_namespace_without_a_launch(
    k8s_admin: Admin,
    portal: dict[str, Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    namespace = portal["project"].namespace
    l4 = Flavor.objects.get(slug="l4-12g")
    with django_capture_on_commit_callbacks(execute=True):
        set_quota(
            actor=portal["lead"],
            team=portal["teams"]["vision"],
            project=portal["project"],
            flavor=l4,
            guaranteed=2,
            limit=4,
        )
    hard = k8s_admin.core.read_namespaced_resource_quota("gpu-portal-quota", namespace).spec.hard
    # A100 16 + L4 12G 4 (its own split) + L4 6G 16 (the team's); vGPU memory and cores as
    # much as the GPU-equivalents can hold (4 x 0.5 + 16 x 0.25 = 6 cards of 24 GiB); MIG.
    assert hard == {
        "requests.nvidia.com/gpu": "36",
        "requests.nvidia.com/gpumem": str(6 * 24576),
        "requests.nvidia.com/gpucores": "600",
        "requests.nvidia.com/mig-1g.10gb": "14",
        "requests.nvidia.com/mig-3g.40gb": "4",
    }
    with django_capture_on_commit_callbacks(execute=True):
        set_quota(
            actor=portal["lead"],
            team=portal["teams"]["vision"],
            project=portal["project"],
            flavor=l4,
            guaranteed=2,
            limit=2,
        )
    hard = k8s_admin.core.read_namespaced_resource_quota("gpu-portal-quota", namespace).spec.hard
    assert hard["requests.nvidia.com/gpu"] == "34"
    assert hard["requests.nvidia.com/gpumem"] == str(5 * 24576)
    assert not k8s_admin.batch.list_namespaced_job(namespace).items  # nothing was launched


def test_a_node_missing_its_modes_resources_is_held_back_and_shown(
    k8s_backend: Any, portal: dict[str, Any]
) -> None:
    counts = apply_inventory(k8s_backend.sync_inventory())
    assert counts["held_back"] >= 1
    bare = Node.objects.get(name=BARE_VGPU_NODE)
    assert bare.pool.slug == "l4-vgpu" and bare.is_schedulable
    assert "nvidia.com/gpumem or nvidia.com/gpucores" in bare.held_back_reason
    assert not Node.objects.filter(name="l4-vgpu-1").get().held_back_reason
    nodes = {node.id: node for node in build_snapshot().nodes}
    assert not nodes[BARE_VGPU_NODE].schedulable
    assert nodes["l4-vgpu-1"].schedulable and nodes["h100-mig-1"].schedulable
    assert AuditEvent.objects.filter(action="node.held_back", target_id=str(bare.pk)).exists()
    client = Client()
    client.force_login(portal["admin"])
    page = client.get(reverse("fleet-page")).content.decode()
    assert BARE_VGPU_NODE in page and "is HAMi&#x27;s device plugin running there?" in page


def test_a_foreign_gpu_pod_reduces_the_capacity_the_engine_sees(
    k8s_backend: Any,
    k8s_admin: Admin,
    portal: dict[str, Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    flavor = own_pool(portal, FOREIGN_NODE)
    namespace = portal["project"].namespace
    foreign_pod(k8s_admin, namespace, FOREIGN_NODE, gpus=3)
    apply_inventory(k8s_backend.sync_inventory())
    assert Node.objects.get(name=FOREIGN_NODE).foreign_usage == {"nvidia.com/gpu": 3}
    devices = [d for d in build_snapshot().devices if d.node_id == FOREIGN_NODE]
    assert sum(not d.whole_allocated for d in devices) == 1
    # Two cards do not fit beside the other tenant's three; one does.
    two = submit(portal, flavor, gpu_count=2)
    assert admit(django_capture_on_commit_callbacks) == []
    two.refresh_from_db()
    assert two.status == RequestStatus.QUEUED
    one = submit(portal, flavor, gpu_count=1)
    assert admit(django_capture_on_commit_callbacks) == [(one.pk, 1)]


def foreign_pod(admin: Admin, namespace: str, node: str, *, gpus: int) -> str:
    """A GPU pod without the portal's labels on `node`, running (kwok) for an hour."""
    from kubernetes import client as k8s

    # Made before the portal's first launch there, so handed over to it with the portal's label.
    handed_over = {"app.kubernetes.io/managed-by": "gpu-portal"}
    with contextlib.suppress(k8s.ApiException):
        admin.core.create_namespace({"metadata": {"name": namespace, "labels": handed_over}})
    name = f"other-{uuid.uuid4().hex[:6]}"
    admin.core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": name, "annotations": runs_for("1h")},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": node},
                "tolerations": [
                    {
                        "key": GPU_TOLERATION.key,
                        "operator": "Exists",
                        "effect": GPU_TOLERATION.effect,
                    }
                ],
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.example.com/other:1",
                        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                    }
                ],
            },
        },
    )

    def running() -> bool:
        pod = admin.core.read_namespaced_pod(name, namespace)
        return pod.status.phase == "Running"

    eventually(running, timeout=30, what=f"the other tenant's pod on {node}")
    return name
