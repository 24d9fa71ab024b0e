"""The web API and a real Celery worker driving the real control plane.

A developer asks through `POST /api/v1/requests/`, the lead approves through the API, and from
then on only the worker process acts (beat runs the scheduling cycle, launch tasks create the
Job on the test bed's API server as the least-privilege `gpu-portal` user, the sync task maps
what kwok and the Job controller report back). The test only watches `GET /api/v1/requests/<id>/`
and, as cluster admin, the objects in the project's namespace.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.urls import reverse

from runtime.services.inventory import apply_inventory
from scheduling.models import Allocation, GpuRequest
from scripts.testbed.cluster import Testbed
from tenants.models import Project
from tests.k8s.conftest import Admin
from tests.scheduling.conftest import Fleet, fleet  # noqa: F401 — the fleet fixture
from tests.scheduling.helpers import request_body
from tests.support.personas import Org, api_client
from tests.support.worker import WorkerProcess, celery_worker

pytestmark = [pytest.mark.k8s, pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def k8s_worker_env(k8s_testbed: Testbed) -> dict[str, str]:
    """The worker talks to the test bed as the `gpu-portal` user; reclaim passes stay out of the
    way (their zombie sweep would see other tests' namespaces)."""
    return {
        "CLUSTER_BACKEND": "kubernetes",
        "KUBECONFIG": str(k8s_testbed.portal_kubeconfig),
        "WORKLOAD_SYNC_SECONDS": "0.5",
        "SCHEDULING_CYCLE_SECONDS": "1",
        "RECLAIM_INTERVAL_SECONDS": "3600",
        "SAMPLE_INTERVAL_SECONDS": "3600",
    }


@pytest.fixture
def test_bed_project(org: Org, k8s_admin: Admin) -> Iterator[Project]:
    """A project of team A with a namespace new to the session's cluster."""
    project = Project.objects.create(
        team=org.team_a, slug=f"w{uuid.uuid4().hex[:8]}", name="Web flow"
    )
    yield project
    k8s_admin.core.delete_namespace(project.namespace, _preload_content=False)


def wait_for(check: Callable[[], Any], *, timeout: float, worker: WorkerProcess, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(
        f"timed out waiting for {what}\n--- worker log ---\n{worker.output()[-6000:]}"
    )


def test_a_request_made_and_approved_through_the_api_runs_to_succeeded_on_the_cluster(
    org: Org,
    fleet: Fleet,  # noqa: F811
    k8s_backend: Any,
    k8s_admin: Admin,
    k8s_worker_env: dict[str, str],
    test_bed_project: Project,
    clean_redis: str,
) -> None:
    apply_inventory(k8s_backend.sync_inventory())
    developer, lead = api_client(org.dev_a), api_client(org.lead_a)
    seen: list[str] = []

    def status_of(pk: int) -> str:
        response = developer.get(reverse("gpu-request-detail", kwargs={"pk": pk}))
        assert response.status_code == 200
        status = str(response.json()["status"])
        if not seen or seen[-1] != status:
            seen.append(status)
        return status

    with celery_worker(clean_redis, **k8s_worker_env) as worker:
        created = developer.post(
            reverse("gpu-request-list"),
            request_body(test_bed_project, fleet.a100, gpu_count=2),
            format="json",
        )
        assert created.status_code == 201, created.content
        pk = created.json()["id"]
        # Whole A100 cards in the training tier need the lead.
        assert created.json()["status"] == "pending_approval"
        approved = lead.post(reverse("gpu-request-approve", kwargs={"pk": pk}), {}, format="json")
        assert approved.status_code == 200, approved.content
        wait_for(
            lambda: status_of(pk) in ("succeeded", "failed"),
            timeout=90,
            worker=worker,
            what="the request to finish",
        )
    assert seen[-1] == "succeeded", (seen, worker.output()[-4000:])
    order = ["pending_approval", "queued", "admitted", "launching", "running", "succeeded"]
    assert [s for s in seen if s in order] == sorted(
        [s for s in seen if s in order], key=order.index
    )
    # The worker made exactly one Job, in the project's namespace, named for the attempt, and
    # the real scheduler bound its pod to the node the portal's engine chose.
    allocation = Allocation.objects.get(request_id=pk)
    jobs = k8s_admin.batch.list_namespaced_job(test_bed_project.namespace).items
    assert [j.metadata.name for j in jobs] == [f"gpr-{pk}-a1"] == [allocation.workload_name]
    (pod,) = k8s_admin.core.list_namespaced_pod(test_bed_project.namespace).items
    assert pod.spec.node_name == allocation.node_name
    assert pod.status.phase == "Succeeded"
    assert allocation.started_at is not None and allocation.ended_at is not None


def test_cancel_through_the_api_deletes_the_running_notebook_from_the_cluster(
    org: Org,
    fleet: Fleet,  # noqa: F811
    k8s_backend: Any,
    k8s_admin: Admin,
    k8s_worker_env: dict[str, str],
    test_bed_project: Project,
    clean_redis: str,
) -> None:
    apply_inventory(k8s_backend.sync_inventory())
    developer = api_client(org.dev_a)
    namespace = test_bed_project.namespace
    with celery_worker(clean_redis, **k8s_worker_env) as worker:
        created = developer.post(
            reverse("gpu-request-list"),
            request_body(test_bed_project, fleet.mig_1g, kind="notebook"),
            format="json",
        )
        assert created.status_code == 201, created.content
        pk = created.json()["id"]
        detail = reverse("gpu-request-detail", kwargs={"pk": pk})
        wait_for(
            lambda: developer.get(detail).json()["status"] == "running",
            timeout=90,
            worker=worker,
            what="the notebook to run",
        )
        assert [
            d.metadata.name for d in k8s_admin.apps.list_namespaced_deployment(namespace).items
        ] == [f"gpr-{pk}-a1"]
        assert k8s_admin.core.list_namespaced_pod(namespace).items
        # Another team cannot cancel it (and does not learn it exists).
        outsider = api_client(org.dev_b).post(
            reverse("gpu-request-cancel", kwargs={"pk": pk}), {}, format="json"
        )
        assert outsider.status_code == 404
        cancelled = developer.post(
            reverse("gpu-request-cancel", kwargs={"pk": pk}), {}, format="json"
        )
        assert cancelled.status_code == 200, cancelled.content
        assert cancelled.json()["status"] == "cancelled"

        def cluster_is_empty() -> bool:
            return not (
                k8s_admin.apps.list_namespaced_deployment(namespace).items
                or k8s_admin.core.list_namespaced_service(namespace).items
                or k8s_admin.core.list_namespaced_pod(namespace).items
            )

        wait_for(cluster_is_empty, timeout=60, worker=worker, what="the workload to be deleted")
    request = GpuRequest.objects.get(pk=pk)
    assert request.status == "cancelled"
    assert Allocation.objects.get(request=request).ended_at is not None
