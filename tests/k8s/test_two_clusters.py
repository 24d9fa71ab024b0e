"""Two control planes behind one portal: the session's test bed is the local cluster, a second
one is registered with its kubeconfig. Each runs a request to `succeeded` on its own nodes, and
while the second is down the first keeps launching and finishing work."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from runtime import tasks
from runtime.cluster.base import ClusterError
from runtime.services import execution
from scheduling.choices import RequestStatus
from scheduling.models import GpuRequest, Node
from scheduling.services import cycle
from scripts.testbed.cluster import Testbed, whole_card_node
from tests.k8s.conftest import Admin, eventually
from tests.k8s.east import EAST_NODE, EAST_POOL, seed_with_east, submit_a100

pytestmark = [pytest.mark.k8s, pytest.mark.django_db]


@pytest.fixture(scope="module")
def east_bed(k8s_testbed: Testbed) -> Iterator[Testbed]:
    """A second control plane with one 8-card A100 node labelled for the `east-a100` pool."""
    bed = Testbed().start(nodes=[whole_card_node(EAST_NODE, pool=EAST_POOL)])
    try:
        yield bed
    finally:
        bed.stop()


@pytest.fixture
def portal(
    k8s_backend: Any, east_bed: Testbed, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    """The demo organisation and fleet on the local cluster, plus the `east` cluster whose pool
    also sells the demo's A100 flavor."""
    settings.CLUSTER_BACKEND = "kubernetes"
    monkeypatch.setattr(execution, "cluster_backend", lambda: k8s_backend)
    return seed_with_east(east_bed)


def _request_label(job: Any) -> str:
    return str(job.metadata.labels["gpu-portal/request"])


def _run(requests: list[GpuRequest], captured: Any) -> None:
    """A cycle admits them; each is launched on its cluster; the periodic sync (the task, on
    every cluster) follows them until they finish."""
    with captured(execute=True):
        admitted = cycle.run_cycle().admitted
    assert sorted(admitted) == sorted(r.pk for r in requests)
    for request in requests:
        execution.launch_request(request_id=request.pk, attempt=1)

    def finished() -> bool:
        with contextlib.suppress(ClusterError):  # a cluster that is down; the others were synced
            tasks.sync_workloads()
        states = set(
            GpuRequest.objects.filter(pk__in=[r.pk for r in requests]).values_list(
                "status", flat=True
            )
        )
        return states <= {RequestStatus.SUCCEEDED, RequestStatus.FAILED}

    eventually(finished, timeout=120, what="the requests finished")


def test_each_cluster_runs_its_request_and_survives_the_others_outage(
    portal: dict[str, Any],
    east_bed: Testbed,
    k8s_admin: Admin,
    django_capture_on_commit_callbacks: Any,
) -> None:
    east, local, project = portal["east"], portal["local"], portal["project"]
    east_admin = east_bed.api_client(east_bed.admin_kubeconfig)
    east_core, east_batch = k8s.CoreV1Api(east_admin), k8s.BatchV1Api(east_admin)
    try:
        # Inventory, cluster by cluster: the east node lands in the east pool.
        tasks.sync_inventory()
        east_node = Node.objects.get(name=EAST_NODE)
        assert east_node.pool == portal["east_pool"]
        assert east_node.is_schedulable

        # One request per cluster, both to succeeded, each on its own control plane.
        on_local, on_east = submit_a100(portal, local), submit_a100(portal, east)
        _run([on_local, on_east], django_capture_on_commit_callbacks)
        assert execution.attempt_cluster(on_east.pk, 1) == east
        assert execution.attempt_cluster(on_local.pk, 1) == local
        for request in (on_local, on_east):
            request.refresh_from_db()
            assert request.status == RequestStatus.SUCCEEDED, request.status_reason
        east_jobs = east_batch.list_namespaced_job(project.namespace).items
        local_jobs = k8s_admin.batch.list_namespaced_job(project.namespace).items
        assert [_request_label(job) for job in east_jobs] == [str(on_east.pk)]
        assert [_request_label(job) for job in local_jobs] == [str(on_local.pk)]
        (pod,) = east_core.list_namespaced_pod(project.namespace).items
        assert pod.spec and pod.spec.node_name == EAST_NODE

        # East goes down: the local cluster still launches and finishes work; the outage is
        # recorded on east, and east's node is not declared lost for a failed read.
        east_bed.stop_apiserver()
        during = submit_a100(portal, local)
        _run([during], django_capture_on_commit_callbacks)
        during.refresh_from_db()
        assert during.status == RequestStatus.SUCCEEDED, during.status_reason
        with pytest.raises(ClusterError):  # east's failure, raised after local was served
            tasks.sync_inventory()
        east.refresh_from_db()
        local.refresh_from_db()
        assert east.last_error and not east.is_reachable
        assert local.is_reachable and local.last_contact_at is not None
        assert Node.objects.get(name=EAST_NODE).is_schedulable
    finally:
        if not east_bed.components["kube-apiserver"].alive():
            east_bed.start_apiserver_again()
        k8s_admin.core.delete_namespace(project.namespace, _preload_content=False)
        with contextlib.suppress(k8s.ApiException):  # never made there
            east_core.delete_namespace(project.namespace, _preload_content=False)
