"""Gangs (one Job per node plus a headless Service) and HAMi's card selection, without a server:
manifests, the spec's rules, the status of a gang, and the backend on the fake API."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from kubernetes import client as k8s

from runtime.cluster import kubernetes_manifests as manifests
from runtime.cluster import project_manifests
from runtime.cluster.base import (
    GANG_SIZE_LABEL,
    RANK_LABEL,
    GangMember,
    PermanentClusterError,
    WorkloadSpec,
)
from runtime.cluster.kubernetes import KubernetesClusterBackend
from runtime.cluster.kubernetes_status import gang_status, hami_assigned_uuids
from scripts.testbed.cluster import hami_register
from tests.cluster import recorded as r
from tests.cluster.fake_api import FakeApiServer
from tests.cluster.specs import NAMESPACE, project, workload
from tests.cluster.test_manifests import assert_valid, round_trips_through_client_models

NS_PATH = f"/api/v1/namespaces/{NAMESPACE}"
JOBS = f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs"
T0, T1, T2 = "2026-12-01T10:00:00Z", "2026-12-01T10:02:00Z", "2026-12-01T10:09:00Z"
MEMBERS = (GangMember("gpu-a100-01", 8), GangMember("gpu-a100-02", 8), GangMember("gpu-a100-03", 4))


def gang_spec(**changes: Any) -> WorkloadSpec:
    return workload("job", "exclusive", **{"gpu_count": 20, "gang": MEMBERS, **changes})


# Manifests ----------------------------------------------------------------------------------


def test_a_gang_is_a_headless_service_and_one_job_per_node_all_schema_valid() -> None:
    bodies = manifests.workload_manifests(gang_spec())
    assert [(b["kind"], b["metadata"]["name"]) for b in bodies] == [
        ("Service", "gpr-812-a1"),
        ("Job", "gpr-812-a1-r0"),
        ("Job", "gpr-812-a1-r1"),
        ("Job", "gpr-812-a1-r2"),
    ]
    for body in bodies:
        assert_valid(body)
        assert round_trips_through_client_models(body)
    service = bodies[0]["spec"]
    assert service["clusterIP"] == "None" and service["publishNotReadyAddresses"] is True
    assert service["ports"] == [
        {"name": "rendezvous", "port": 29500, "targetPort": 29500, "protocol": "TCP"}
    ]


def test_each_rank_is_pinned_to_its_node_with_its_cards_and_the_gang_env() -> None:
    jobs = manifests.workload_manifests(gang_spec())[1:]
    for rank, (job, member) in enumerate(zip(jobs, MEMBERS, strict=True)):
        pod = job["spec"]["template"]["spec"]
        assert pod["nodeSelector"]["kubernetes.io/hostname"] == member.node_name
        assert "nodeName" not in pod, "kube-scheduler still binds and checks resources"
        assert pod["hostname"] == f"gpr-812-a1-r{rank}" and pod["subdomain"] == "gpr-812-a1"
        container = pod["containers"][0]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == str(member.gpu_count)
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["MASTER_ADDR"] == f"gpr-812-a1-r0.gpr-812-a1.{NAMESPACE}.svc"
        assert env["MASTER_PORT"] == "29500"
        assert (env["WORLD_SIZE"], env["NNODES"]) == ("3", "3")
        assert env["RANK"] == env["NODE_RANK"] == str(rank)
        assert env["NPROC_PER_NODE"] == str(member.gpu_count)
        assert env["GANG_HOSTS"].split(",")[2] == "gpr-812-a1-r2.gpr-812-a1"
        assert env["WANDB_MODE"] == "offline", "the user's env stays"
        for labels in (job["metadata"]["labels"], job["spec"]["template"]["metadata"]["labels"]):
            assert labels[RANK_LABEL] == str(rank) and labels[GANG_SIZE_LABEL] == "3"
            assert labels["gpu-portal/workload"] == "gpr-812-a1", "the Service selects every rank"
        assert job["spec"]["backoffLimit"] == 0


def test_a_gang_left_to_the_cluster_scheduler_pins_no_node() -> None:
    spec = gang_spec(gang=tuple(replace(m, node_name=None) for m in MEMBERS))
    for job in manifests.workload_manifests(spec)[1:]:
        assert "kubernetes.io/hostname" not in job["spec"]["template"]["spec"]["nodeSelector"]


@pytest.mark.parametrize(
    "changes",
    [
        {"gang": (GangMember("a", 20),)},
        {"gang": MEMBERS, "gpu_count": 19},
        {"gang": (GangMember("a", 10), GangMember("a", 10))},
        {"gang": (GangMember("a", 20), GangMember("b", 0))},
        {"gang": MEMBERS, "kind": "notebook"},
    ],
)
def test_gang_specs_that_cannot_run_are_refused(changes: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        workload(**{"kind": "job", "sharing": "exclusive", "gpu_count": 20, **changes})


def test_a_vgpu_pod_asks_hami_for_the_portal_cards_by_uuid_and_type() -> None:
    spec = workload("notebook", "vgpu", gpu_uuids=("GPU-1", "GPU-3"), gpu_types=("NVIDIA-L4",) * 2)
    deployment = manifests.workload_manifests(spec)[0]
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["nvidia.com/use-gpuuuid"] == "GPU-1,GPU-3"
    assert annotations["nvidia.com/use-gputype"] == "NVIDIA-L4"
    assert "nvidia.com/use-gpuuuid" not in deployment["metadata"].get("annotations", {})
    assert_valid(deployment)
    plain = manifests.workload_manifests(workload("job", "exclusive", gpu_uuids=("GPU-1",)))[0]
    assert "nvidia.com/use-gpuuuid" not in plain["spec"]["template"]["metadata"]["annotations"]


# Status -------------------------------------------------------------------------------------


def rank_pod(rank: int, phase: str, *, node: str, terminated: dict[str, Any] | None = None) -> Any:
    state = {"terminated": terminated} if terminated else {"running": {"startedAt": T1}}
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"gpr-812-a1-r{rank}-x",
            "namespace": NAMESPACE,
            "creationTimestamp": T0,
            "labels": {**r.LABELS, RANK_LABEL: str(rank), GANG_SIZE_LABEL: "3"},
        },
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "x"}]},
        "status": {
            "phase": phase,
            "containerStatuses": [
                {"name": "main", "image": "x", "imageID": "", "ready": True, "restartCount": 0}
                | {"state": state}
            ],
        },
    }
    return r.deserialize(body, "V1Pod")


def gang_of(*pods: Any) -> Any:
    """The gang's status with a Job (no condition yet) for each rank that has a pod."""
    jobs = []
    for pod in pods:
        job: Any = r.job()
        job.metadata.labels = {**job.metadata.labels, **pod.metadata.labels}
        jobs.append(job)
    return gang_status(namespace=NAMESPACE, request_id="812", attempt=1, jobs=jobs, pods=pods)


def test_a_gang_runs_when_every_rank_runs() -> None:
    status = gang_of(*(rank_pod(i, "Running", node=f"n{i}") for i in range(3)))
    assert (status.phase, status.gang_size, status.name) == ("running", 3, "gpr-812-a1")
    assert status.node_names == ("n0", "n1", "n2") and status.node_name == "n0"


def test_a_gang_with_a_failed_rank_has_failed_and_says_which() -> None:
    crash = {"exitCode": 1, "reason": "Error", "startedAt": T1, "finishedAt": T2}
    status = gang_of(
        rank_pod(0, "Running", node="n0"),
        rank_pod(1, "Failed", node="n1", terminated=crash),
        rank_pod(2, "Running", node="n2"),
    )
    assert status.phase == "failed" and status.reason == "Error"
    assert status.message.startswith("rank 1 on n1: container main exited with code 1")


def test_a_gang_missing_a_rank_is_incomplete() -> None:
    status = gang_of(rank_pod(0, "Running", node="n0"), rank_pod(2, "Running", node="n2"))
    assert (status.phase, status.reason) == ("pending", "GangIncomplete")
    assert "rank 1 of 3" in status.message


def test_hami_assignment_is_read_from_the_pod_annotation() -> None:
    pod = k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(
            annotations={
                "hami.io/vgpu-devices-allocated": "GPU-a,NVIDIA,3000,30:GPU-b,NVIDIA,3000,30:;"
            }
        )
    )
    assert hami_assigned_uuids(pod) == ("GPU-a", "GPU-b")
    assert hami_assigned_uuids(k8s.V1Pod(metadata=k8s.V1ObjectMeta())) == ()


# Backend on the fake API --------------------------------------------------------------------


@pytest.fixture
def server() -> FakeApiServer:
    fake = FakeApiServer()
    fake.put(NS_PATH, project_manifests.namespace_manifest(project()))
    return fake


@pytest.fixture
def backend(server: FakeApiServer) -> KubernetesClusterBackend:
    return KubernetesClusterBackend(api_client=server.api_client())


def test_gang_launch_creates_the_service_and_every_rank_once(
    backend: KubernetesClusterBackend, server: FakeApiServer
) -> None:
    assert backend.launch(gang_spec()) == "gpr-812-a1"
    assert backend.launch(gang_spec()) == "gpr-812-a1", "a repeat adopts"
    assert sorted(p for p in server.objects if p != NS_PATH) == [
        f"{NS_PATH}/services/gpr-812-a1",
        *(f"{JOBS}/gpr-812-a1-r{i}" for i in range(3)),
    ]
    assert len(server.calls("POST")) == 4 + 4


def test_gang_launch_is_all_or_nothing(
    backend: KubernetesClusterBackend, server: FakeApiServer
) -> None:
    server.fail("POST", r"/jobs$", 422, times=3, reason="Invalid")  # the third rank's create
    with pytest.raises(PermanentClusterError):
        backend.launch(gang_spec())
    assert set(server.objects) == {NS_PATH}, "the Service and ranks 0-1 were deleted again"


def test_terminate_deletes_every_rank_the_service_and_the_pods(
    backend: KubernetesClusterBackend, server: FakeApiServer
) -> None:
    backend.launch(gang_spec())
    server.put(f"{NS_PATH}/pods/gpr-812-a1-r1-x", {"metadata": {"labels": r.LABELS}})
    backend.terminate(NAMESPACE, "812", 1, reason="a rank failed", grace_seconds=0)
    assert set(server.objects) == {NS_PATH}
    patched = {p for m, p in server.calls("PATCH")}
    assert {f"{JOBS}/gpr-812-a1-r{i}" for i in range(3)} <= patched, "the reason is recorded"


def test_get_workload_reads_a_gang_as_one_workload(
    backend: KubernetesClusterBackend, server: FakeApiServer
) -> None:
    backend.launch(gang_spec())
    status = backend.get_workload(NAMESPACE, "812", 1)
    assert (status.phase, status.reason, status.gang_size) == ("pending", "NoPod", 3)
    (listed,) = backend.list_workloads()
    assert (listed.name, listed.gang_size) == ("gpr-812-a1", 3)


def test_vgpu_launch_resolves_the_engine_cards_to_hami_uuids(
    backend: KubernetesClusterBackend, server: FakeApiServer
) -> None:
    server.put(
        "/api/v1/nodes/gpu-a100-01",
        {
            "metadata": {
                "name": "gpu-a100-01",
                "annotations": {"hami.io/node-nvidia-register": hami_register(4)},
            }
        },
    )
    backend.launch(workload("job", "vgpu", gpu_count=2, device_indexes=(1, 3)))
    job = server.objects[f"{JOBS}/gpr-812-a1"]
    annotations = job["spec"]["template"]["metadata"]["annotations"]
    assert annotations["nvidia.com/use-gpuuuid"] == "GPU-testbed-1,GPU-testbed-3"
    assert annotations["nvidia.com/use-gputype"] == "NVIDIA-NVIDIA L4"
