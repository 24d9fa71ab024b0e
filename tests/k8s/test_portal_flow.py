"""The portal's own services driving the real cluster: submit → approve → cycle (the engine
places it on an inventory-synced node) → launch_request → sync_workloads → succeeded."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.services import execution
from scheduling.choices import RequestStatus
from scheduling.models import Allocation
from scheduling.services import cycle
from tests.k8s.conftest import Admin, approved_requests, eventually

pytestmark = [pytest.mark.k8s, pytest.mark.django_db]


def test_a_whole_card_request_runs_to_succeeded_through_the_portal_services(
    k8s_backend: Any, k8s_admin: Admin, django_capture_on_commit_callbacks: Any
) -> None:
    (request,) = approved_requests(k8s_backend, count=1, gpu_count=2)
    project = request.project
    admitted: list[tuple[int, int]] = []
    try:
        with django_capture_on_commit_callbacks(execute=True):
            cycle.run_cycle(on_admit=lambda r, a: admitted.append((r, a)))
        assert admitted == [(request.pk, 1)]
        allocation = Allocation.objects.get(request=request)
        name = execution.launch_request(request_id=request.pk, attempt=1, backend=k8s_backend)
        # A duplicated launch task adopts the Job instead of creating a second one.
        assert execution.launch_request(request_id=request.pk, attempt=1, backend=k8s_backend)
        jobs = k8s_admin.batch.list_namespaced_job(project.namespace).items
        assert [j.metadata.name for j in jobs] == [name]
        # The engine chose the node; the real scheduler honoured it.
        (pod,) = eventually(
            lambda: [
                p
                for p in k8s_admin.core.list_namespaced_pod(project.namespace).items
                if p.spec.node_name
            ],
            what="the pod bound",
        )
        assert pod.spec.node_name == allocation.node_name
        assert pod.spec.priority == execution.PRIORITY_CLASSES["normal"].value

        def finished() -> bool:
            execution.sync_workloads(backend=k8s_backend)
            request.refresh_from_db()
            return request.status in (RequestStatus.SUCCEEDED, RequestStatus.FAILED)

        eventually(finished, what="the request finished")
        assert request.status == RequestStatus.SUCCEEDED
        allocation.refresh_from_db()
        assert allocation.started_at is not None and allocation.ended_at is not None
        quota = k8s_admin.core.read_namespaced_resource_quota("gpu-portal-quota", project.namespace)
        # Whole A100 cards (limit 16) and L4 vGPU shares (16 + 16) share the resource name.
        assert quota.spec.hard["requests.nvidia.com/gpu"] == "48"
    finally:
        k8s_admin.core.delete_namespace(project.namespace, _preload_content=False)
