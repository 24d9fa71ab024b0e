"""Reclamation on the real control plane: a notebook is scaled to zero (Deployment and Service
kept, pods gone) and resumed by the next attempt in place; a job is deleted. Plus GPU model
pinning: the product-label affinity the manifests emit is what the real scheduler enforces."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from runtime.cluster.base import (
    ATTEMPT_LABEL,
    SUSPENDED_AT_ANNOTATION,
    SUSPENDED_REPLICAS_ANNOTATION,
    WorkloadStatus,
)
from runtime.cluster.gpu_models import DEFAULT_GPU_MODEL_ALIASES, gpu_products_for
from scheduling.services.requests import GpuRequestSpec, resume_gpu_request, submit_gpu_request
from tests.k8s.conftest import Admin, eventually
from tests.k8s.helpers import job, runs_for

pytestmark = pytest.mark.k8s


def status_of(backend: Any, namespace: str, request_id: str, attempt: int) -> WorkloadStatus:
    result: WorkloadStatus = backend.get_workload(namespace, request_id, attempt)
    return result


def pods_of(admin: Admin, namespace: str) -> list[Any]:
    return [
        p
        for p in admin.core.list_namespaced_pod(namespace).items
        if not p.metadata.deletion_timestamp
    ]


def test_a_reclaimed_notebook_is_scaled_to_zero_and_resumed_in_place(
    k8s_backend: Any, k8s_project: str, k8s_admin: Admin
) -> None:
    first = job(k8s_project, kind="notebook", pool="l4-vgpu", max_runtime_seconds=None)
    first = replace(first, sharing="vgpu", vgpu_memory_mib=6144, vgpu_cores_percent=25)
    rid = first.request_id
    k8s_backend.launch(first)
    eventually(
        lambda: status_of(k8s_backend, k8s_project, rid, 1).phase == "running",
        what="the notebook running",
    )
    service_uid = k8s_admin.core.read_namespaced_service(first.name, k8s_project).metadata.uid

    # Reclaim: replicas 0, the count to come back to recorded, pods (and GPUs) gone at once.
    assert k8s_backend.scale_to_zero(k8s_project, rid, 1, reason="reclaimed: idle") is True
    deployment = k8s_admin.apps.read_namespaced_deployment(first.name, k8s_project)
    assert deployment.spec.replicas == 0
    assert deployment.metadata.annotations[SUSPENDED_REPLICAS_ANNOTATION] == "1"
    suspended_at = deployment.metadata.annotations[SUSPENDED_AT_ANNOTATION]
    eventually(lambda: not pods_of(k8s_admin, k8s_project), what="the pods gone")
    status = status_of(k8s_backend, k8s_project, rid, 1)
    assert (status.phase, status.reason) == ("suspended", "ScaledToZero")
    assert status.suspended_at is not None
    listed = [w for w in k8s_backend.list_workloads([k8s_project]) if w.request_id == rid]
    assert [w.phase for w in listed] == ["suspended"]  # what zombie cleanup sees
    # A retried scale-down keeps the first record.
    assert k8s_backend.scale_to_zero(k8s_project, rid, 1, reason="reclaimed: idle") is True
    again = k8s_admin.apps.read_namespaced_deployment(first.name, k8s_project)
    assert again.metadata.annotations[SUSPENDED_AT_ANNOTATION] == suspended_at

    # Resume: the next attempt (placed on another node by the engine) takes the same
    # Deployment back with its recorded replicas; the Service is the same object.
    second = replace(first, attempt=2, node_name="l4-vgpu-2")
    assert k8s_backend.launch(second) == first.name
    assert k8s_backend.launch(second) == first.name  # a retried launch: nothing new
    assert [
        d.metadata.name for d in k8s_admin.apps.list_namespaced_deployment(k8s_project).items
    ] == [first.name]
    resumed = eventually(
        lambda: (s := status_of(k8s_backend, k8s_project, rid, 2)).phase == "running" and s,
        what="the resumed notebook running",
    )
    assert resumed.name == first.name and resumed.node_name == "l4-vgpu-2"
    deployment = k8s_admin.apps.read_namespaced_deployment(first.name, k8s_project)
    assert deployment.spec.replicas == 1
    assert SUSPENDED_REPLICAS_ANNOTATION not in (deployment.metadata.annotations or {})
    (pod,) = pods_of(k8s_admin, k8s_project)
    assert pod.metadata.labels[ATTEMPT_LABEL] == "2"
    assert k8s_admin.core.read_namespaced_service(first.name, k8s_project).metadata.uid == (
        service_uid
    )
    assert status_of(k8s_backend, k8s_project, rid, 1).phase == "missing"  # attempt 1 is over

    # Terminating the resumed attempt deletes the taken-over objects.
    k8s_backend.terminate(k8s_project, rid, 2, reason="cancelled", grace_seconds=0)
    eventually(lambda: status_of(k8s_backend, k8s_project, rid, 2).phase == "missing")
    assert not k8s_admin.core.list_namespaced_service(k8s_project).items


def test_a_reclaimed_job_is_deleted_not_scaled(
    k8s_backend: Any, k8s_project: str, k8s_admin: Admin
) -> None:
    spec = job(k8s_project, annotations=runs_for("1h"))
    k8s_backend.launch(spec)
    eventually(
        lambda: status_of(k8s_backend, k8s_project, spec.request_id, 1).phase == "running",
        what="the job running",
    )
    assert k8s_backend.scale_to_zero(k8s_project, spec.request_id, 1, reason="idle") is False
    eventually(
        lambda: status_of(k8s_backend, k8s_project, spec.request_id, 1).phase == "missing",
        what="the job deleted",
    )
    assert not k8s_admin.batch.list_namespaced_job(k8s_project).items


def test_a_workload_pinned_to_a_gpu_model_lands_only_on_nodes_with_its_product_label(
    k8s_backend: Any, k8s_project: str
) -> None:
    # The A100 nodes say NVIDIA-A100-SXM4-80GB, as GPU feature discovery would.
    a100 = job(
        k8s_project,
        annotations=runs_for("1h"),
        gpu_products=gpu_products_for("A100-80G", DEFAULT_GPU_MODEL_ALIASES),
    )
    k8s_backend.launch(a100)
    running = eventually(
        lambda: (
            (s := status_of(k8s_backend, k8s_project, a100.request_id, 1)).phase == "running" and s
        ),
        what="the A100 job running",
    )
    assert running.node_name in ("a100-training-1", "a100-training-2")
    # The same pool, pinned to another model: no node matches, the scheduler says so.
    wrong = job(
        k8s_project,
        annotations=runs_for("1h"),
        gpu_products=gpu_products_for("H100-80G", DEFAULT_GPU_MODEL_ALIASES),
    )
    k8s_backend.launch(wrong)
    pending = eventually(
        lambda: (
            (s := status_of(k8s_backend, k8s_project, wrong.request_id, 1)).reason
            == "Unschedulable"
            and s
        ),
        what="the wrong-model job unschedulable",
    )
    assert pending.phase == "pending" and "affinity" in pending.message


@pytest.mark.django_db
def test_the_portal_reclaims_a_notebook_to_zero_and_resume_brings_the_same_deployment_back(
    k8s_backend: Any, k8s_admin: Admin, django_capture_on_commit_callbacks: Any
) -> None:
    import uuid

    from django.contrib.auth import get_user_model

    from runtime.services import execution, reclaim
    from runtime.services.inventory import apply_inventory
    from scheduling.choices import RequestStatus
    from scheduling.demo import seed_demo_fleet
    from scheduling.models import Allocation, Flavor
    from scheduling.services import cycle
    from tenants.models import Project
    from tenants.services.organisation import seed_demo_organisation

    teams = seed_demo_organisation(password="x")
    seed_demo_fleet(teams=teams)
    apply_inventory(k8s_backend.sync_inventory())
    project = Project.objects.create(
        team=teams["vision"], slug=f"r{uuid.uuid4().hex[:8]}", name="Reclaim"
    )
    alice = get_user_model().objects.get(username="alice")
    request = submit_gpu_request(
        actor=alice,
        spec=GpuRequestSpec(
            project=project,
            flavor=Flavor.objects.get(slug="h100-1g10gb"),
            gpu_count=1,
            kind="notebook",
            image="registry.example.com/ml/notebook:1.0",
            max_runtime_seconds=3600,
        ),
    )

    def admit_launch_and_run(attempt: int) -> str:
        with django_capture_on_commit_callbacks(execute=False):
            cycle.run_cycle()
        request.refresh_from_db()
        assert (request.status, request.attempt) == (RequestStatus.ADMITTED, attempt)
        name = execution.launch_request(request_id=request.pk, attempt=attempt, backend=k8s_backend)

        def running() -> bool:
            execution.sync_workloads(backend=k8s_backend)
            request.refresh_from_db()
            return request.status == RequestStatus.RUNNING

        eventually(running, what=f"attempt {attempt} running")
        return name

    try:
        name = admit_launch_and_run(1)
        with django_capture_on_commit_callbacks(execute=False):
            assert reclaim.reclaim_request(request, reason="Idle.", code="idle", evidence={})
        # What the queued task does, against the real cluster.
        assert reclaim.scale_request_workload_to_zero(
            request_id=request.pk, attempt=1, reason="reclaimed: idle", backend=k8s_backend
        )
        deployment = k8s_admin.apps.read_namespaced_deployment(name, project.namespace)
        assert deployment.spec.replicas == 0
        eventually(lambda: not pods_of(k8s_admin, project.namespace), what="the pods gone")
        resume_gpu_request(actor=alice, request=request)
        assert admit_launch_and_run(2) == name
        assert Allocation.objects.get(request=request, attempt=2).workload_name == name
        assert [
            d.metadata.name
            for d in k8s_admin.apps.list_namespaced_deployment(project.namespace).items
        ] == [name]
        assert k8s_admin.apps.read_namespaced_deployment(name, project.namespace).spec.replicas == 1
    finally:
        k8s_admin.core.delete_namespace(project.namespace, _preload_content=False)
