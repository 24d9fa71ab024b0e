"""Scale to zero and resume through the real client against the fake API server (the real
control plane is in tests/k8s/test_backend_reclaim.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from runtime.cluster import project_manifests
from runtime.cluster.base import (
    SUSPENDED_AT_ANNOTATION,
    SUSPENDED_REPLICAS_ANNOTATION,
)
from runtime.cluster.kubernetes import KubernetesClusterBackend
from tests.cluster.fake_api import FakeApiServer
from tests.cluster.specs import NAMESPACE, project, workload

NS_PATH = f"/api/v1/namespaces/{NAMESPACE}"
DEPLOYMENTS = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments"


@pytest.fixture
def server() -> FakeApiServer:
    fake = FakeApiServer()
    fake.put(NS_PATH, project_manifests.namespace_manifest(project()))
    return fake


@pytest.fixture
def backend(server: FakeApiServer) -> KubernetesClusterBackend:
    return KubernetesClusterBackend(api_client=server.api_client())


def test_scale_to_zero_keeps_the_deployment_and_records_the_replicas(
    backend: KubernetesClusterBackend, server: FakeApiServer
) -> None:
    spec = workload("notebook", "vgpu")
    backend.launch(spec)
    assert backend.scale_to_zero(NAMESPACE, "812", 1, reason="reclaimed: idle") is True
    deployment = server.objects[f"{DEPLOYMENTS}/gpr-812-a1"]
    assert deployment["spec"]["replicas"] == 0
    annotations = deployment["metadata"]["annotations"]
    assert annotations[SUSPENDED_REPLICAS_ANNOTATION] == "1"
    first = annotations[SUSPENDED_AT_ANNOTATION]
    assert f"{NS_PATH}/services/gpr-812-a1" in server.objects
    assert ("DELETE", f"{NS_PATH}/pods") in server.calls("DELETE")
    status = backend.get_workload(NAMESPACE, "812", 1)
    assert (status.phase, status.reason) == ("suspended", "ScaledToZero")
    # Again: the recorded count and time are those of the first scale-down.
    assert backend.scale_to_zero(NAMESPACE, "812", 1, reason="again") is True
    assert (
        server.objects[f"{DEPLOYMENTS}/gpr-812-a1"]["metadata"]["annotations"][
            SUSPENDED_AT_ANNOTATION
        ]
        == first
    )


def test_scale_to_zero_of_a_job_terminates_it(
    backend: KubernetesClusterBackend, server: FakeApiServer
) -> None:
    backend.launch(workload("job"))
    assert backend.scale_to_zero(NAMESPACE, "812", 1, reason="reclaimed: idle") is False
    assert not any("/jobs/" in path for path in server.objects)


def test_resume_relabels_replaces_and_scales_the_deployment_back(
    backend: KubernetesClusterBackend, server: FakeApiServer
) -> None:
    first = workload("service", "vgpu")  # placed on gpu-a100-01
    backend.launch(first)
    backend.scale_to_zero(NAMESPACE, "812", 1, reason="reclaimed: idle")
    second = replace(first, attempt=2, node_name=None, gpu_products=())
    assert backend.launch(second) == "gpr-812-a1"
    assert backend.launch(second) == "gpr-812-a1"  # a retried launch creates nothing
    assert f"{DEPLOYMENTS}/gpr-812-a2" not in server.objects
    deployment = server.objects[f"{DEPLOYMENTS}/gpr-812-a1"]
    assert deployment["spec"]["replicas"] == 1
    assert deployment["metadata"]["labels"]["gpu-portal/attempt"] == "2"
    template = deployment["spec"]["template"]
    assert template["metadata"]["labels"]["gpu-portal/attempt"] == "2"
    # The cluster now places it: the old hostname pin and the model affinity are gone.
    assert template["spec"]["nodeSelector"] == {"gpu-portal/pool": "a100-train"}
    assert "affinity" not in template["spec"]
    assert SUSPENDED_REPLICAS_ANNOTATION not in deployment["metadata"].get("annotations", {})
    assert backend.get_workload(NAMESPACE, "812", 2).name == "gpr-812-a1"
    assert backend.get_workload(NAMESPACE, "812", 1).phase == "missing"
    backend.terminate(NAMESPACE, "812", 2, reason="cancelled")
    assert f"{DEPLOYMENTS}/gpr-812-a1" not in server.objects
    assert f"{NS_PATH}/services/gpr-812-a1" not in server.objects


def test_without_a_suspended_deployment_a_notebook_is_launched_afresh(
    backend: KubernetesClusterBackend, server: FakeApiServer
) -> None:
    assert backend.resume(workload("notebook", "vgpu", attempt=2)) is None
    assert backend.launch(workload("notebook", "vgpu", attempt=2)) == "gpr-812-a2"
    assert f"{DEPLOYMENTS}/gpr-812-a2" in server.objects


def test_a_first_attempt_launches_without_looking_for_a_deployment_to_resume(
    backend: KubernetesClusterBackend, server: FakeApiServer
) -> None:
    assert backend.launch(workload("notebook", "vgpu", attempt=1)) == "gpr-812-a1"
    assert ("GET", DEPLOYMENTS) not in server.calls("GET")
    assert [path for _, path in server.calls("POST")] == [DEPLOYMENTS, f"{NS_PATH}/services"]
