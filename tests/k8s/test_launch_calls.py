"""What a launch asks of the real API server: the first in a project written straight to the
database ensures the priority classes and the project (namespace, quota, limit range); the next
ones, and every launch into a project created through the portal, create their Job only, or a
notebook's objects after reading its node's HAMi registration."""

from __future__ import annotations

import re
import uuid
from typing import Any
from urllib.parse import unquote_plus, urlsplit

import pytest
from django.contrib.auth import get_user_model

from runtime.cluster.kubernetes import KubernetesClusterBackend
from runtime.selectors.workloads import LIVE_STATUSES
from runtime.services import execution, propagation
from runtime.services.inventory import apply_inventory
from scheduling.choices import RequestStatus
from scheduling.demo import seed_demo_fleet
from scheduling.models import Flavor, GpuRequest
from scheduling.services import cycle
from scheduling.services.requests import GpuRequestSpec, submit_gpu_request
from tenants.models import Project
from tenants.services.organisation import create_project, seed_demo_organisation
from tests.k8s.conftest import Admin, approved_a100_request, approved_requests, eventually

pytestmark = [pytest.mark.k8s, pytest.mark.django_db]


def counting(
    backend: KubernetesClusterBackend, monkeypatch: pytest.MonkeyPatch, *, with_query: bool = False
) -> list[str]:
    """Every API request the backend makes from now on, as "METHOD /path" (and "?query",
    unquoted, `with_query`)."""
    calls: list[str] = []
    call_api = backend.api_client.call_api

    def counted(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        parts = urlsplit(url)
        query = f"?{unquote_plus(parts.query)}" if with_query and parts.query else ""
        calls.append(f"{method} {parts.path}{query}")
        return call_api(method, url, *args, **kwargs)

    monkeypatch.setattr(backend.api_client, "call_api", counted)
    return calls


def test_a_steady_state_launch_makes_one_api_call(
    k8s_testbed: Any,
    k8s_admin: Admin,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    # A backend of its own, so nothing an earlier test ensured is remembered.
    backend = KubernetesClusterBackend(kubeconfig=str(k8s_testbed.portal_kubeconfig))
    requests = approved_requests(backend)
    project = requests[0].project
    calls = counting(backend, monkeypatch)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            cycle.run_cycle()
        execution.launch_request(request_id=requests[0].pk, attempt=1, backend=backend)
        assert len(calls) >= 4  # priority classes, namespace, quota, limit range, Job
        for request in requests[1:]:
            calls.clear()
            execution.launch_request(request_id=request.pk, attempt=1, backend=backend)
            assert calls == [f"POST /apis/batch/v1/namespaces/{project.namespace}/jobs"]
        jobs = k8s_admin.batch.list_namespaced_job(project.namespace).items
        assert len(jobs) == 3
    finally:
        k8s_admin.core.delete_namespace(project.namespace, _preload_content=False)


def test_the_periodic_sync_follows_the_watch_between_full_passes(
    k8s_testbed: Any,
    k8s_admin: Admin,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    backend = KubernetesClusterBackend(kubeconfig=str(k8s_testbed.portal_kubeconfig))
    requests = approved_requests(backend)
    namespace = requests[0].project.namespace
    try:
        with django_capture_on_commit_callbacks(execute=True):
            cycle.run_cycle()
        for request in requests:
            execution.launch_request(request_id=request.pk, attempt=1, backend=backend)
        calls = counting(backend, monkeypatch, with_query=True)
        jobs_list = f"GET /apis/batch/v1/namespaces/{namespace}/jobs?"
        execution.sync_watched_workloads(backend=backend)  # the first pass lists
        assert any(call.startswith(jobs_list) for call in calls)
        listed = len(calls)

        def finished() -> bool:
            execution.sync_watched_workloads(backend=backend)
            return not GpuRequest.objects.filter(
                pk__in=[r.pk for r in requests], status__in=LIVE_STATUSES
            ).exists()

        eventually(finished, timeout=60, what="every request finished, seen through the watch")
        # The later passes watched and read only the changed workloads: a list of Jobs (when
        # several changed at once) selects them by their request ids, never the namespace.
        later = [call for call in calls[listed:] if call.startswith(jobs_list)]
        ids = {str(r.pk) for r in requests}
        assert all(re.search(r"gpu-portal/request in \(([\d,]+)\)", call) for call in later), later
        assert {
            request_id
            for call in later
            for request_id in re.findall(r"in \(([\d,]+)\)", call)[0].split(",")
        } <= ids
        statuses = set(
            GpuRequest.objects.filter(pk__in=[r.pk for r in requests]).values_list(
                "status", flat=True
            )
        )
        assert statuses == {RequestStatus.SUCCEEDED}
    finally:
        k8s_admin.core.delete_namespace(namespace, _preload_content=False)


def test_a_new_project_is_ready_before_its_first_launch(
    k8s_testbed: Any,
    k8s_admin: Admin,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    # The worker's own backend (CLUSTER_BACKEND) makes the project ready after the commit.
    settings.CLUSTER_BACKEND = "kubernetes"
    settings.KUBECONFIG = str(k8s_testbed.portal_kubeconfig)
    execution.cluster_backend.cache_clear()
    teams = seed_demo_organisation(password="x")
    seed_demo_fleet(teams=teams)
    apply_inventory(execution.cluster_backend().sync_inventory())
    users = get_user_model().objects
    alice, bob = users.get(username="alice"), users.get(username="bob")
    slug = f"p{uuid.uuid4().hex[:8]}"
    try:
        # 1. The lead creates a project: its namespace, quota and limit range exist at once.
        with django_capture_on_commit_callbacks(execute=True):
            project = create_project(actor=bob, team=teams["vision"], name="Ready", slug=slug)
        namespace = project.namespace
        quota = k8s_admin.core.read_namespaced_resource_quota("gpu-portal-quota", namespace)
        want = propagation.project_spec(project).quota  # Vision's limits, in the cluster's units
        assert want and {key: int(value) for key, value in quota.spec.hard.items()} == want
        assert k8s_admin.core.list_namespaced_limit_range(namespace).items

        # 2. A request is admitted; the launch, from a worker process that never launched here
        #    (a backend of its own, nothing remembered in memory), creates its Job and nothing else.
        request = approved_a100_request(project, alice, bob)
        with django_capture_on_commit_callbacks(execute=False):
            cycle.run_cycle()
        backend = KubernetesClusterBackend(kubeconfig=str(k8s_testbed.portal_kubeconfig))
        calls = counting(backend, monkeypatch)
        execution.launch_request(request_id=request.pk, attempt=1, backend=backend)
        assert calls == [f"POST /apis/batch/v1/namespaces/{namespace}/jobs"]
    finally:
        execution.cluster_backend.cache_clear()
        k8s_admin.core.delete_namespace(f"gpu-vision-{slug}", _preload_content=False)


def test_a_vgpu_notebook_launch_creates_its_six_objects_after_one_metadata_read(
    k8s_testbed: Any,
    k8s_admin: Admin,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    # A routed notebook: its token Secret, Deployment, Service, Ingress and the host's
    # /_portal/ route (an ExternalName Service and an Ingress).
    settings.PORTAL_URL = "https://gpu.example.com"
    settings.WORKLOAD_DOMAIN = "workloads.example.org"
    backend = KubernetesClusterBackend(kubeconfig=str(k8s_testbed.portal_kubeconfig))
    teams = seed_demo_organisation(password="x")
    seed_demo_fleet(teams=teams)
    apply_inventory(backend.sync_inventory())
    project = Project.objects.create(
        team=teams["vision"], slug=f"k{uuid.uuid4().hex[:8]}", name="Test bed"
    )
    alice = get_user_model().objects.get(username="alice")
    spec = GpuRequestSpec(
        project=project,
        flavor=Flavor.objects.get(slug="l4-6g"),
        gpu_count=1,
        kind="notebook",
        image="registry.example.com/ml/jupyter:2024.10",
        max_runtime_seconds=3600,
    )
    first, second = (submit_gpu_request(actor=alice, spec=spec) for _ in range(2))
    namespace = project.namespace
    try:
        with django_capture_on_commit_callbacks(execute=True):
            cycle.run_cycle()
        execution.launch_request(request_id=first.pk, attempt=1, backend=backend)
        calls = counting(backend, monkeypatch)
        accepts: list[str] = []
        counted = backend.api_client.call_api

        def accepted(method: str, url: str, headers: Any = None, *args: Any, **kw: Any) -> Any:
            if urlsplit(url).path == "/api/v1/nodes":
                accepts.append((headers or {}).get("Accept", ""))
            return counted(method, url, headers, *args, **kw)

        monkeypatch.setattr(backend.api_client, "call_api", accepted)
        execution.launch_request(request_id=second.pk, attempt=1, backend=backend)

        core, networking = f"/api/v1/namespaces/{namespace}", "/apis/networking.k8s.io/v1"
        assert calls == [
            "GET /api/v1/nodes",  # the node's HAMi registration: the engine's card's UUID
            f"POST {core}/secrets",
            f"POST /apis/apps/v1/namespaces/{namespace}/deployments",
            f"POST {core}/services",
            f"POST {networking}/namespaces/{namespace}/ingresses",
            f"POST {core}/services",
            f"POST {networking}/namespaces/{namespace}/ingresses",
        ]
        # The registration is an annotation: the node's spec and status are not sent.
        assert accepts == ["application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"]
        deployment = k8s_admin.apps.read_namespaced_deployment(f"gpr-{second.pk}-a1", namespace)
        pod_annotations = deployment.spec.template.metadata.annotations
        assert pod_annotations["nvidia.com/use-gpuuuid"].startswith("GPU-testbed-")
    finally:
        k8s_admin.core.delete_namespace(namespace, _preload_content=False)
