"""A Kueue-mode cluster beside a portal-mode one: the session's test bed is the local cluster
(the portal's engine places there), a second control plane runs Kueue's controller and is
registered in Kueue mode. In one cycle the engine places the local request and Kueue gets the
other; each runs to `succeeded` on its own control plane."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from kubernetes import client as k8s

from runtime import tasks
from runtime.cluster.base import ClusterError
from runtime.services import execution
from scheduling.choices import RequestStatus
from scheduling.models import Allocation, GpuRequest
from scheduling.services import cycle
from scheduling.services.kueue_drift import last_check
from scripts.testbed.cluster import Testbed, whole_card_node
from tests.k8s.conftest import Admin, eventually
from tests.k8s.east import EAST_NODE, EAST_POOL, seed_with_east, submit_a100
from tests.k8s.helpers import kueue_testbed

pytestmark = [pytest.mark.k8s, pytest.mark.django_db]

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"


@pytest.fixture(scope="module")
def kueue_east(k8s_testbed: Testbed) -> Iterator[Testbed]:
    """A second control plane with Kueue's controller and one 8-card A100 node."""
    with kueue_testbed([whole_card_node(EAST_NODE, pool=EAST_POOL)]) as bed:
        yield bed


@pytest.fixture
def portal(
    k8s_backend: Any, kueue_east: Testbed, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    """The demo organisation and fleet on the local cluster (SCHEDULER=portal), and `east` in
    Kueue mode, whose pool also sells the demo's A100 flavor."""
    settings.CLUSTER_BACKEND = "kubernetes"
    settings.SCHEDULER = "portal"
    monkeypatch.setattr(execution, "cluster_backend", lambda: k8s_backend)
    return seed_with_east(kueue_east, scheduler="kueue")


def test_a_kueue_cluster_and_a_portal_cluster_each_run_a_job_to_succeeded(
    portal: dict[str, Any],
    kueue_east: Testbed,
    k8s_admin: Admin,
    django_capture_on_commit_callbacks: Any,
) -> None:
    east, local, project = portal["east"], portal["local"], portal["project"]
    east_admin = kueue_east.api_client(kueue_east.admin_kubeconfig)
    objects: Any = k8s.CustomObjectsApi(east_admin)
    east_batch = k8s.BatchV1Api(east_admin)
    try:
        # The east cluster's policy: its pool, its quota cells, a LocalQueue per project.
        out = StringIO()
        call_command("kueue_policy", "--apply", "--cluster", "east", stdout=out)
        assert "create ResourceFlavor east-a100" in out.getvalue()
        flavors = objects.list_cluster_custom_object(GROUP, VERSION, "resourceflavors")["items"]
        assert [f["metadata"]["name"] for f in flavors] == [EAST_POOL]
        objects.get_namespaced_custom_object(
            GROUP, VERSION, project.namespace, "localqueues", "gpu-portal"
        )
        # The periodic task checks east only: the local cluster runs the portal's engine.
        assert tasks.reconcile_kueue_policy() == 0
        check = last_check("east")
        assert check is not None and check.differences == () and not check.error
        assert last_check("local") is None

        tasks.sync_inventory()  # the local nodes, for the engine
        on_local, on_east = submit_a100(portal, None), submit_a100(portal, east)
        with django_capture_on_commit_callbacks(execute=True):
            admitted = cycle.run_cycle().admitted
        assert sorted(admitted) == sorted([on_local.pk, on_east.pk])
        placed = Allocation.objects.get(request=on_local)
        handed = Allocation.objects.get(request=on_east)
        assert placed.pool.cluster == local and placed.node_name
        assert (handed.pool, handed.node_name) == (portal["east_pool"], "")
        for request in (on_local, on_east):
            execution.launch_request(request_id=request.pk, attempt=1)
        jobs: Any = east_batch.list_namespaced_job(project.namespace).items
        assert [j.metadata.labels["kueue.x-k8s.io/queue-name"] for j in jobs] == ["gpu-portal"]

        def finished() -> bool:
            with contextlib.suppress(ClusterError):
                tasks.sync_workloads()
            states = set(
                GpuRequest.objects.filter(pk__in=[on_local.pk, on_east.pk]).values_list(
                    "status", flat=True
                )
            )
            return states <= {RequestStatus.SUCCEEDED, RequestStatus.FAILED}

        eventually(finished, timeout=120, what="both requests finished")
        for request in (on_local, on_east):
            request.refresh_from_db()
            assert request.status == RequestStatus.SUCCEEDED, request.status_reason
        # Kueue admitted the east Job in team Vision's ClusterQueue, in the east pool's flavor.
        (workload,) = objects.list_namespaced_custom_object(
            GROUP, VERSION, project.namespace, "workloads"
        )["items"]
        admission = workload["status"]["admission"]
        assert admission["clusterQueue"] == "gpu-portal-vision"
        assert admission["podSetAssignments"][0]["flavors"] == {"nvidia.com/gpu": EAST_POOL}
        local_jobs = k8s_admin.batch.list_namespaced_job(project.namespace).items
        assert [j.metadata.labels["gpu-portal/request"] for j in local_jobs] == [str(on_local.pk)]
        assert "kueue.x-k8s.io/queue-name" not in (local_jobs[0].metadata.labels or {})
    finally:
        k8s_admin.core.delete_namespace(project.namespace, _preload_content=False)
        with contextlib.suppress(k8s.ApiException):
            k8s.CoreV1Api(east_admin).delete_namespace(project.namespace, _preload_content=False)
