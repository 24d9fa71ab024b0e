"""Host resources on the real control plane: a request that fits a node's GPUs but not its CPU is
never pinned there.

Two 8-card A100 nodes of a pool of their own: `hr-a-small` (8 cores, 64 GiB; first by name, so
a placement by GPUs alone would pick it) and `hr-b-big` (96 cores, 1 TiB). A 4-card request
asking for 32 CPU and 128 GiB is pinned to the big node and kube-scheduler runs it there (kwok);
a second one asking for more CPU than either node has left waits with the `host_resources`
blocker and no pod is created for it.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import replace
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth import get_user_model

from runtime.services import execution
from runtime.services.inventory import apply_inventory
from scheduling.choices import FlavorKind, RequestStatus, SharingMode
from scheduling.demo import GPU_TAINT, seed_demo_fleet
from scheduling.models import Allocation, Flavor, GpuRequest, Node, NodePool, Quota
from scheduling.services import cycle
from scripts.testbed.cluster import whole_card_node
from tenants.models import Project
from tenants.services.organisation import seed_demo_organisation
from tests.k8s.conftest import Admin, eventually
from tests.k8s.helpers import runs_for
from tests.support.factories import GpuRequestFactory

pytestmark = [pytest.mark.k8s, pytest.mark.django_db]
POOL = "hr-test"
SMALL, BIG = "hr-a-small", "hr-b-big"
GIB = 1024


@pytest.fixture(scope="module")
def host_nodes(k8s_testbed: Any, k8s_admin: Admin) -> Iterator[None]:
    k8s_testbed.add_nodes(
        [
            whole_card_node(SMALL, pool=POOL, cpu="8", memory="64Gi"),
            whole_card_node(BIG, pool=POOL, cpu="96", memory="1Ti"),
        ]
    )
    yield
    for name in (SMALL, BIG):
        with contextlib.suppress(Exception):
            k8s_admin.core.delete_node(name, _preload_content=False)


@pytest.fixture
def portal(
    k8s_backend: Any,
    k8s_admin: Admin,
    portal_priorities: None,
    host_nodes: None,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[dict[str, Any]]:
    monkeypatch.setattr(execution, "cluster_backend", lambda: k8s_backend)
    teams = seed_demo_organisation(password="x")
    seed_demo_fleet(teams=teams)
    project = Project.objects.create(
        team=teams["vision"], slug=f"k{uuid.uuid4().hex[:8]}", name="Test bed"
    )
    a100 = NodePool.objects.get(slug="a100-training")
    pool = NodePool.objects.create(
        name="Host resources test",
        slug=POOL,
        tier=a100.tier,
        sharing_mode=SharingMode.EXCLUSIVE,
        node_selector={"gpu-portal/pool": POOL},
        taints=[GPU_TAINT],
    )
    flavor = Flavor.objects.create(
        name="HR A100",
        slug="hr-a100",
        pool=pool,
        kind=FlavorKind.WHOLE,
        gpu_model="A100-80G",
        gpu_memory_mib=81920,
        gpu_cores_percent=100,
        gpu_equivalent=Decimal(1),
    )
    Quota.objects.create(team=teams["vision"], flavor=flavor, guaranteed=16, limit=16)
    yield {
        "project": project,
        "flavor": flavor,
        "dev": get_user_model().objects.get(username="alice"),
    }
    with contextlib.suppress(Exception):
        k8s_admin.core.delete_namespace(project.namespace, _preload_content=False)


def submit(portal: dict[str, Any], **fields: Any) -> GpuRequest:
    return GpuRequestFactory.create(
        project=portal["project"],
        flavor=portal["flavor"],
        actor=portal["dev"],
        to="queued",
        kind="job",
        **fields,
    )


def admit(capture: Any) -> list[tuple[int, int]]:
    admitted: list[tuple[int, int]] = []
    with capture(execute=True):
        cycle.run_cycle(on_admit=lambda r, a: admitted.append((r, a)))
    return admitted


def test_a_request_that_fits_the_gpus_but_not_the_cpu_is_never_pinned_to_that_node(
    k8s_backend: Any,
    k8s_admin: Admin,
    portal: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    apply_inventory(k8s_backend.sync_inventory())
    small, big = Node.objects.get(name=SMALL), Node.objects.get(name=BIG)
    assert (small.cpu_millicores, small.memory_mib) == (8_000, 64 * GIB)
    assert (big.cpu_millicores, big.memory_mib) == (96_000, 1024 * GIB)

    request = submit(portal, gpu_count=4, cpu_millicores=32_000, memory_mib=128 * GIB)
    assert admit(django_capture_on_commit_callbacks) == [(request.pk, 1)]
    assert Allocation.objects.get(request=request).node_name == BIG

    spec_of = execution.workload_spec
    monkeypatch.setattr(
        execution,
        "workload_spec",
        lambda *args: replace(spec_of(*args), extra_annotations=runs_for("1h")),
    )
    execution.launch_request(request_id=request.pk, attempt=1, backend=k8s_backend)
    namespace = portal["project"].namespace

    def running() -> Any:
        pods = k8s_admin.core.list_namespaced_pod(
            namespace, label_selector=f"gpu-portal/request={request.pk}"
        ).items
        return next((p for p in pods if p.status.phase == "Running"), None)

    pod = eventually(running, timeout=60, what="the pod running (kube-scheduler bound it)")
    assert pod.spec.node_name == BIG
    requests = pod.spec.containers[0].resources.requests
    assert (requests["cpu"], requests["memory"]) == ("32", "128Gi")

    # 64 CPU are left on the big node and 8 on the small one: 72 fit nowhere.
    hungry = submit(portal, gpu_count=1, cpu_millicores=72_000)
    assert admit(django_capture_on_commit_callbacks) == []
    hungry.refresh_from_db()
    assert hungry.status == RequestStatus.QUEUED
    assert hungry.blocker["code"] == "host_resources"
    assert hungry.blocker["detail"]["most_cpu_free_millicores"] == 64_000
    left = k8s_admin.core.list_namespaced_pod(
        namespace, label_selector=f"gpu-portal/request={hungry.pk}"
    ).items
    assert left == []
