"""Engine decisions carried out on the real control plane: the cycle's preemption deletes the
victim's Job and the preemptor's pod runs on the freed node; a real worker's reclaim pass scales
an idle notebook's Deployment to zero; a worker SIGKILLed inside a launch loses and duplicates
no Job."""

from __future__ import annotations

import contextlib
import time
import uuid
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from runtime.cluster.base import WorkloadSpec
from runtime.services import execution
from runtime.services.inventory import apply_inventory
from scheduling.choices import RequestStatus
from scheduling.demo import seed_demo_fleet
from scheduling.models import (
    Allocation,
    Cluster,
    Flavor,
    GpuRequest,
    Quota,
    UtilisationSample,
    local_cluster_id,
)
from scheduling.services import cycle
from scheduling.services.requests import GpuRequestSpec, approve_gpu_request, submit_gpu_request
from scripts.testbed.cluster import Testbed
from tenants.models import Project
from tenants.services.organisation import seed_demo_organisation
from tests.k8s.conftest import Admin, eventually
from tests.k8s.helpers import runs_for
from tests.support.prometheus import FakePrometheus, serving
from tests.support.worker import celery_worker

pytestmark = pytest.mark.k8s


class LongRunning:
    """The portal's backend, with kwok told to keep each launched pod running for an hour (a
    portal Job would otherwise complete in about a second, before the engine could preempt it)."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend

    def launch(self, spec: WorkloadSpec) -> str:
        annotations = {**spec.extra_annotations, **runs_for("1h")}
        name: str = self.backend.launch(replace(spec, extra_annotations=annotations))
        return name

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)


def live_pods(admin: Admin, namespace: str) -> list[Any]:
    return [
        p
        for p in admin.core.list_namespaced_pod(namespace).items
        if not p.metadata.deletion_timestamp
    ]


@pytest.mark.django_db
def test_the_cycle_preempts_low_priority_work_and_the_cluster_follows(
    k8s_backend: Any, k8s_admin: Admin, django_capture_on_commit_callbacks: Any
) -> None:
    backend = LongRunning(k8s_backend)
    teams = seed_demo_organisation(password="x")
    seed_demo_fleet(teams=teams)
    apply_inventory(k8s_backend.sync_inventory())
    a100 = Flavor.objects.get(slug="a100-80g")
    # The team's guarantee covers one A100 node; the cohort's idle guarantee (another team's)
    # lets it borrow the second node and then the preemptor's GPUs, up to its limit.
    Quota.objects.filter(team=teams["vision"], flavor=a100).update(guaranteed=8, limit=24)
    Quota.objects.create(team=teams["speech"], project=None, flavor=a100, guaranteed=16, limit=16)
    project = Project.objects.create(
        team=teams["vision"], slug=f"p{uuid.uuid4().hex[:8]}", name="Preemption"
    )
    users = get_user_model().objects
    alice, bob = users.get(username="alice"), users.get(username="bob")

    def submit(priority: str, *, preemptible: bool) -> GpuRequest:
        request = submit_gpu_request(
            actor=alice,
            spec=GpuRequestSpec(
                project=project,
                flavor=a100,
                gpu_count=8,
                image="registry.example.com/ml/train:1.0",
                command=["python", "train.py"],
                max_runtime_seconds=3600,
                priority=priority,
                is_preemptible=preemptible,
            ),
        )
        if request.status == RequestStatus.PENDING_APPROVAL:
            approve_gpu_request(actor=bob, request=request)
        return request

    def run(request: GpuRequest) -> Allocation:
        attempt = GpuRequest.objects.get(pk=request.pk).attempt
        execution.launch_request(request_id=request.pk, attempt=attempt, backend=backend)

        def running() -> bool:
            execution.sync_workloads(backend=k8s_backend)
            request.refresh_from_db()
            return request.status == RequestStatus.RUNNING

        eventually(running, what=f"request {request.pk} running")
        return Allocation.objects.get(request=request, attempt=attempt)

    try:
        # A whole A100 node each: a normal-priority request in the team's guarantee, then a
        # low-priority preemptible one on borrowed quota.
        other = submit("normal", preemptible=False)
        with django_capture_on_commit_callbacks(execute=True):
            assert cycle.run_cycle().admitted == [other.pk]
        other_allocation = run(other)
        low = submit("low", preemptible=True)
        with django_capture_on_commit_callbacks(execute=True):
            assert cycle.run_cycle().admitted == [low.pk]
        low_allocation = run(low)
        assert low_allocation.is_preemptible and not other_allocation.is_preemptible
        assert {low_allocation.node_name, other_allocation.node_name} == {
            "a100-training-1",
            "a100-training-2",
        }
        low_job = low_allocation.workload_name
        jobs = k8s_admin.batch.list_namespaced_job(project.namespace).items
        assert sorted(j.metadata.name for j in jobs) == sorted(
            [low_job, other_allocation.workload_name]
        )
        submitted_at = GpuRequest.objects.get(pk=low.pk).created_at  # the queue's age order

        # A high-priority request needs a whole node: the engine evicts the low one; the
        # preemption callback is the worker's terminate path, run against the cluster.
        high = submit("high", preemptible=False)
        preempted: list[tuple[int, int]] = []
        admitted: list[tuple[int, int]] = []

        def terminate(request_id: int, attempt: int) -> None:
            preempted.append((request_id, attempt))
            execution.terminate_request_workload(
                request_id=request_id, attempt=attempt, reason="preempted", backend=k8s_backend
            )

        with django_capture_on_commit_callbacks(execute=True):
            result = cycle.run_cycle(
                on_preempt=terminate, on_admit=lambda r, a: admitted.append((r, a))
            )
        assert result.preempted == [low.pk] and preempted == [(low.pk, 1)]
        assert admitted == [(high.pk, 1)]
        low.refresh_from_db()
        assert low.status == RequestStatus.QUEUED
        assert low.created_at == submitted_at  # back in the queue with its age
        assert Allocation.objects.get(request=low, attempt=1).end_reason == "preempted"
        eventually(
            lambda: (
                not [
                    j
                    for j in k8s_admin.batch.list_namespaced_job(project.namespace).items
                    if j.metadata.name == low_job
                ]
            ),
            what="the preempted Job deleted",
        )
        eventually(
            lambda: (
                not [
                    p
                    for p in k8s_admin.core.list_namespaced_pod(project.namespace).items
                    if p.metadata.name.startswith(low_job)
                ]
            ),
            what="the preempted pod gone",
        )

        # The preemptor runs on the node the victim left.
        high_allocation = run(high)
        assert high_allocation.node_name == low_allocation.node_name
        (pod,) = [
            p
            for p in live_pods(k8s_admin, project.namespace)
            if p.metadata.name.startswith(high_allocation.workload_name)
        ]
        assert pod.spec.node_name == low_allocation.node_name
        assert pod.status.phase == "Running"
        assert pod.spec.priority == execution.PRIORITY_CLASSES["high"].value
        other.refresh_from_db()
        assert other.status == RequestStatus.RUNNING  # guaranteed work is left alone
        low.refresh_from_db()
        assert low.status == RequestStatus.QUEUED
    finally:
        with contextlib.suppress(Exception):  # never created
            k8s_admin.core.delete_namespace(project.namespace, _preload_content=False)


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_reclaims_an_idle_notebook_and_scales_it_to_zero(
    k8s_testbed: Testbed, k8s_backend: Any, k8s_admin: Admin, clean_redis: str
) -> None:
    teams = seed_demo_organisation(password="x")
    seed_demo_fleet(teams=teams)
    apply_inventory(k8s_backend.sync_inventory())
    project = Project.objects.create(
        team=teams["vision"], slug=f"i{uuid.uuid4().hex[:8]}", name="Idle"
    )
    alice = get_user_model().objects.get(username="alice")
    worker_env = {
        "CLUSTER_BACKEND": "kubernetes",
        "KUBECONFIG": str(k8s_testbed.portal_kubeconfig),
        "WORKLOAD_SYNC_SECONDS": "0.5",
        "SCHEDULING_CYCLE_SECONDS": "1",
        "RECLAIM_INTERVAL_SECONDS": "1",
        "SAMPLE_INTERVAL_SECONDS": "3600",  # the samples are the test's
    }
    try:
        with contextlib.ExitStack() as stack:
            worker = stack.enter_context(celery_worker(clean_redis, **worker_env))
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

            def status() -> str:
                return str(GpuRequest.objects.get(pk=request.pk).status)

            def wait(check: Any, what: str, timeout: float = 90) -> Any:
                deadline = time.monotonic() + timeout
                while time.monotonic() < deadline:
                    if value := check():
                        return value
                    time.sleep(0.3)
                raise AssertionError(f"timed out: {what}\n{worker.output()[-6000:]}")

            wait(lambda: status() == RequestStatus.RUNNING, "the notebook running")
            allocation = Allocation.objects.get(request=request, attempt=1)
            name = allocation.workload_name
            assert k8s_admin.apps.read_namespaced_deployment(name, project.namespace).spec.replicas
            # Twenty idle minutes at 1% after an idle warning ten minutes ago, while the
            # cluster's Prometheus reports the notebook's GPU (a real cluster's idle reclaim
            # pauses without it): one pass of the worker's reclaim task takes the GPUs back.
            now = timezone.now()
            prometheus = stack.enter_context(serving(_dcgm_reporting(project.namespace, name)))
            with transaction.atomic():
                Cluster.objects.filter(pk=local_cluster_id()).update(
                    prometheus_url=prometheus.url,
                    activity_signal_at=now,
                    activity_signal_since=now - timedelta(minutes=30),
                )
                Allocation.objects.filter(pk=allocation.pk).update(
                    started_at=now - timedelta(minutes=30)
                )
                UtilisationSample.objects.bulk_create(
                    UtilisationSample(
                        allocation=allocation,
                        sampled_at=now - timedelta(minutes=20 - i),
                        activity_percent=1.0,
                    )
                    for i in range(21)
                )
                GpuRequest.objects.filter(pk=request.pk).update(
                    idle_warned_at=now - timedelta(minutes=10)
                )
            wait(lambda: status() == RequestStatus.RECLAIMED, "the notebook reclaimed")
            wait(
                lambda: (
                    k8s_admin.apps.read_namespaced_deployment(name, project.namespace).spec.replicas
                    == 0
                ),
                "the Deployment scaled to zero",
            )
            wait(lambda: not live_pods(k8s_admin, project.namespace), "the pods gone")
            assert "enforce_reclaim_policies" in worker.output()
        request.refresh_from_db()
        assert "under 5%" in request.status_reason
        # Scaled, not deleted: resume takes the same Deployment back.
        assert [
            d.metadata.name
            for d in k8s_admin.apps.list_namespaced_deployment(project.namespace).items
        ] == [name]
        assert Allocation.objects.get(pk=allocation.pk).ended_at is not None
    finally:
        with contextlib.suppress(Exception):  # never created
            k8s_admin.core.delete_namespace(project.namespace, _preload_content=False)


def _dcgm_reporting(namespace: str, workload: str) -> FakePrometheus:
    """A Prometheus whose DCGM exporter reports one MIG slice of `workload` at 1 % (a MIG
    slice has the profiling metric only)."""
    labels = {
        "__name__": "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_DRIVER_VERSION": "550.127.05",
        "GPU_I_ID": "3",
        "GPU_I_PROFILE": "1g.10gb",
        "Hostname": "h100-node-1",
        "UUID": "GPU-5c4e2b1a-8f3d-4e6a-9b7c-1d2e3f4a5b6c",
        "container": "notebook",
        "device": "nvidia0",
        "gpu": "0",
        "modelName": "NVIDIA H100 80GB HBM3",
        "namespace": namespace,
        "pod": f"{workload}-5d8f9c7b6-q4wzn",
    }
    vector = {"resultType": "vector", "result": [{"metric": labels, "value": [0, "0.01"]}]}
    return FakePrometheus({"DCGM_FI_PROF_GR_ENGINE_ACTIVE": {"status": "success", "data": vector}})


LAUNCH = "runtime.tasks.launch_workload"


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_mid_launch_loses_and_duplicates_no_job(
    k8s_testbed: Testbed, k8s_backend: Any, k8s_admin: Admin, clean_redis: str
) -> None:
    teams = seed_demo_organisation(password="x")
    seed_demo_fleet(teams=teams)
    apply_inventory(k8s_backend.sync_inventory())
    a100 = Flavor.objects.get(slug="a100-80g")
    Quota.objects.filter(team=teams["vision"], flavor=a100).update(guaranteed=12, limit=12)
    project = Project.objects.create(
        team=teams["vision"], slug=f"k{uuid.uuid4().hex[:8]}", name="Kill"
    )
    users = get_user_model().objects
    alice, bob = users.get(username="alice"), users.get(username="bob")
    worker_env = {
        "CLUSTER_BACKEND": "kubernetes",
        "KUBECONFIG": str(k8s_testbed.portal_kubeconfig),
        "WORKLOAD_SYNC_SECONDS": "0.5",
        "SCHEDULING_CYCLE_SECONDS": "1",
        "RECLAIM_INTERVAL_SECONDS": "3600",
        "SAMPLE_INTERVAL_SECONDS": "3600",
        "STUCK_TRANSITION_SECONDS": "3",
        "STUCK_SWEEP_SECONDS": "3",
    }
    try:
        with celery_worker(clean_redis, **worker_env) as worker:
            ids: list[int] = []
            for _ in range(12):
                request = submit_gpu_request(
                    actor=alice,
                    spec=GpuRequestSpec(
                        project=project,
                        flavor=a100,
                        gpu_count=1,
                        image="registry.example.com/ml/train:1.0",
                        command=["python", "train.py"],
                        max_runtime_seconds=3600,
                    ),
                )
                approve_gpu_request(actor=bob, request=request)
                ids.append(request.pk)
            # Kill the worker (and its pool) while it runs a launch on the cluster.
            deadline = time.monotonic() + 60
            while LAUNCH not in worker.running_tasks() and time.monotonic() < deadline:
                time.sleep(0.01)
            cut_short = worker.kill()
            worker.start()  # a new worker: the redelivered and the stuck launches are its own

            def settled() -> bool:
                return not GpuRequest.objects.filter(pk__in=ids).exclude(
                    status=RequestStatus.SUCCEEDED
                )

            deadline = time.monotonic() + 150
            while not settled() and time.monotonic() < deadline:
                time.sleep(0.5)
            statuses = sorted(
                GpuRequest.objects.filter(pk__in=ids).values_list("pk", "status", "attempt")
            )
            assert settled(), (statuses, worker.output()[-6000:])
        assert LAUNCH in cut_short, cut_short
        # 0 lost, 0 duplicated: one Job per request, the one its allocation names.
        jobs = sorted(
            j.metadata.name for j in k8s_admin.batch.list_namespaced_job(project.namespace).items
        )
        named = sorted(
            Allocation.objects.filter(request_id__in=ids).values_list("workload_name", flat=True)
        )
        assert len(jobs) == len(ids) and jobs == named, (jobs, named)
    finally:
        with contextlib.suppress(Exception):  # never created
            k8s_admin.core.delete_namespace(project.namespace, _preload_content=False)
