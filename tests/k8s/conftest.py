"""A real Kubernetes control plane for the `k8s` tests: one per pytest session.

etcd, kube-apiserver (TLS, token auth, RBAC), kube-controller-manager, kube-scheduler and kwok run
on free loopback ports from the binaries `make testbed` builds (scripts/testbed/). Fake GPU nodes
shaped like the demo pools are registered before the first test. Tests isolate by namespace.

Skipping: without K8S_TESTBED=1 every test here skips (until CI switches it on). With it, missing
binaries skip the tests locally and FAIL them when CI=true.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from scripts.testbed.cluster import Testbed, TestbedError, bin_dir, missing_binaries


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "k8s: needs the real Kubernetes test bed (K8S_TESTBED=1, make testbed)"
    )


@pytest.fixture(scope="session")
def k8s_testbed() -> Iterator[Testbed]:
    """The session's control plane, started on first use and stopped at the end."""
    if os.environ.get("K8S_TESTBED") != "1":
        pytest.skip("the Kubernetes test bed is off: set K8S_TESTBED=1 (binaries: make testbed)")
    missing = missing_binaries()
    if missing:
        message = (
            f"Kubernetes test-bed binaries missing in {bin_dir()}: {', '.join(missing)}; "
            "build them with `make testbed` (or scripts/testbed/build.sh)"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    bed = Testbed()
    try:
        bed.start()
    except TestbedError as exc:
        pytest.fail(f"the Kubernetes test bed did not start: {exc}")
    try:
        yield bed
    finally:
        bed.stop()


@dataclass
class Admin:
    """Cluster-admin clients for arranging and inspecting what the portal cannot see."""

    core: Any
    batch: Any
    apps: Any
    scheduling: Any
    api_client: Any


@pytest.fixture(scope="session")
def k8s_admin(k8s_testbed: Testbed) -> Admin:
    from kubernetes import client as k8s

    api = k8s_testbed.api_client()
    return Admin(
        core=k8s.CoreV1Api(api),
        batch=k8s.BatchV1Api(api),
        apps=k8s.AppsV1Api(api),
        scheduling=k8s.SchedulingV1Api(api),
        api_client=api,
    )


@pytest.fixture(scope="session")
def k8s_backend(k8s_testbed: Testbed) -> Any:
    """The portal's backend, authenticated as the least-privilege `gpu-portal` user whose
    ClusterRole is the one docs/kubernetes-backend.md documents."""
    from runtime.cluster.kubernetes import KubernetesClusterBackend

    return KubernetesClusterBackend(kubeconfig=str(k8s_testbed.portal_kubeconfig))


@pytest.fixture
def k8s_namespace(k8s_admin: Admin) -> Iterator[str]:
    """A fresh namespace name for one test (the backend creates it); deleted afterwards."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    yield name
    with contextlib.suppress(Exception):  # never created, or already gone
        k8s_admin.core.delete_namespace(name, _preload_content=False)


def eventually(
    check: Callable[[], Any], *, timeout: float = 60.0, interval: float = 0.5, what: str = ""
) -> Any:
    """Poll `check` until it returns something truthy; return that value."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what or check}: {last!r}")


@pytest.fixture(scope="session")
def portal_priorities(k8s_backend: Any) -> None:
    """The portal's PriorityClasses (gpu-portal-low/normal/high/critical), created once."""
    from runtime.services.execution import PRIORITY_CLASSES

    k8s_backend.ensure_priority_classes(list(PRIORITY_CLASSES.values()))


@pytest.fixture
def k8s_project(k8s_backend: Any, k8s_namespace: str, portal_priorities: None) -> str:
    """A project namespace with a 16-GPU quota, made by the backend; returns its name."""
    from tests.k8s.helpers import project

    k8s_backend.ensure_project(project(k8s_namespace))
    return k8s_namespace


def approved_a100_request(project: Any, alice: Any, bob: Any, gpu_count: int = 1) -> Any:
    """An A100 training request of alice's in the demo fleet, approved by bob when the tier asks
    him."""
    from scheduling.choices import RequestStatus
    from scheduling.models import Flavor
    from scheduling.services.requests import (
        GpuRequestSpec,
        approve_gpu_request,
        submit_gpu_request,
    )

    request = submit_gpu_request(
        actor=alice,
        spec=GpuRequestSpec(
            project=project,
            flavor=Flavor.objects.get(slug="a100-80g"),
            gpu_count=gpu_count,
            image="registry.example.com/ml/train:1.0",
            command=["python", "train.py"],
            max_runtime_seconds=3600,
        ),
    )
    if request.status == RequestStatus.PENDING_APPROVAL:
        approve_gpu_request(actor=bob, request=request)
    return request


def approved_requests(backend: Any, count: int = 3, gpu_count: int = 1) -> list[Any]:
    """The demo organisation and fleet, the test bed's inventory, a fresh project of the vision
    team (its namespace new to the cluster) and `count` of alice's A100 requests in it, each of
    `gpu_count` cards, approved."""
    from django.contrib.auth import get_user_model

    from runtime.services.inventory import apply_inventory
    from scheduling.demo import seed_demo_fleet
    from tenants.models import Project
    from tenants.services.organisation import seed_demo_organisation

    teams = seed_demo_organisation(password="x")
    seed_demo_fleet(teams=teams)
    apply_inventory(backend.sync_inventory())
    project = Project.objects.create(
        team=teams["vision"], slug=f"k{uuid.uuid4().hex[:8]}", name="Test bed"
    )
    users = get_user_model().objects
    alice, bob = users.get(username="alice"), users.get(username="bob")
    return [approved_a100_request(project, alice, bob, gpu_count) for _ in range(count)]
