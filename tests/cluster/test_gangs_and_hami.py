"""Gangs (one indexed Job, one pod per node, plus a headless Service) and HAMi's card
selection, without a server: manifests, the spec's rules, the status of a gang, and the backend
on the fake API."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from kubernetes import client as k8s

from runtime.cluster import kubernetes_manifests as manifests
from runtime.cluster import project_manifests
from runtime.cluster.base import (
    GANG_SIZE_LABEL,
    GangMember,
    PermanentClusterError,
    WorkloadSpec,
)
from runtime.cluster.kubernetes import KubernetesClusterBackend
from runtime.cluster.kubernetes_status import gang_status, hami_assigned_uuids
from runtime.cluster.names import COMPLETION_INDEX_ANNOTATION
from scripts.testbed.cluster import hami_register
from tests.cluster import recorded as r
from tests.cluster.fake_api import FakeApiServer
from tests.cluster.specs import NAMESPACE, project, workload
from tests.cluster.test_manifests import assert_valid, round_trips_through_client_models

NS_PATH = f"/api/v1/namespaces/{NAMESPACE}"
JOBS = f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs"
T0, T1, T2 = "2026-12-01T10:00:00Z", "2026-12-01T10:02:00Z", "2026-12-01T10:09:00Z"
NODES = ("gpu-a100-01", "gpu-a100-02", "gpu-a100-03")
MEMBERS = tuple(GangMember(node, 4) for node in NODES)


def gang_spec(**changes: Any) -> WorkloadSpec:
    return workload("job", "exclusive", **{"gpu_count": 12, "gang": MEMBERS, **changes})


def env_of(job: dict[str, Any]) -> dict[str, Any]:
    container = job["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


# Manifests ----------------------------------------------------------------------------------


def test_a_gang_is_a_headless_service_and_one_indexed_job_all_schema_valid() -> None:
    bodies = manifests.workload_manifests(gang_spec())
    assert [(b["kind"], b["metadata"]["name"]) for b in bodies] == [
        ("Service", "gpr-812-a1"),
        ("Job", "gpr-812-a1"),
    ]
    for body in bodies:
        assert_valid(body)
        assert round_trips_through_client_models(body)
    service = bodies[0]["spec"]
    assert service["clusterIP"] == "None" and service["publishNotReadyAddresses"] is True
    assert service["ports"] == [
        {"name": "rendezvous", "port": 29500, "targetPort": 29500, "protocol": "TCP"}
    ]
    job = bodies[1]["spec"]
    assert job["completionMode"] == "Indexed"
    assert job["completions"] == job["parallelism"] == 3, "one pod per node"
    assert job["backoffLimit"] == 0, "one failed rank fails the Job, never a lone retry"
    assert bodies[1]["metadata"]["labels"][GANG_SIZE_LABEL] == "3"
    assert job["template"]["metadata"]["labels"]["gpu-portal/workload"] == "gpr-812-a1"


def test_every_rank_gets_the_per_node_cards_and_the_torchrun_env() -> None:
    job = manifests.workload_manifests(gang_spec())[1]
    pod = job["spec"]["template"]["spec"]
    assert pod["subdomain"] == "gpr-812-a1" and "hostname" not in pod, "<job>-<index>"
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"
    env = env_of(job)
    master = f"gpr-812-a1-0.gpr-812-a1.{NAMESPACE}.svc"
    assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == master
    assert env["MASTER_PORT"] == env["PET_MASTER_PORT"] == "29500"
    assert env["WORLD_SIZE"] == "12", "processes: 3 nodes x 4 GPUs"
    assert env["NNODES"] == env["PET_NNODES"] == "3"
    assert env["NPROC_PER_NODE"] == env["PET_NPROC_PER_NODE"] == "4"
    assert env["PET_RDZV_ENDPOINT"] == f"{master}:29500"
    assert env["PET_RDZV_BACKEND"] == "static"
    index = {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']"}}
    assert env["NODE_RANK"] == env["PET_NODE_RANK"] == index
    assert "RANK" not in env, "torchrun sets each process's RANK"
    assert env["GANG_HOSTS"].split(",") == [f"gpr-812-a1-{i}.gpr-812-a1" for i in range(3)]
    assert env["WANDB_MODE"] == "offline", "the user's env stays"


def test_a_placed_gang_is_held_to_its_nodes_one_rank_on_each() -> None:
    pod = manifests.workload_manifests(gang_spec(gpu_products=("NVIDIA-A100-SXM4-80GB",)))[1]
    spec = pod["spec"]["template"]["spec"]
    assert "kubernetes.io/hostname" not in spec.get("nodeSelector", {})
    (term,) = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert {"key": "kubernetes.io/hostname", "operator": "In", "values": list(NODES)} in term[
        "matchExpressions"
    ]
    assert any(e["key"] == "nvidia.com/gpu.product" for e in term["matchExpressions"])
    (anti,) = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti["topologyKey"] == "kubernetes.io/hostname"
    assert anti["labelSelector"]["matchLabels"]["gpu-portal/attempt"] == "1"


def test_a_gang_left_to_the_cluster_scheduler_pins_no_node() -> None:
    spec = gang_spec(gang=tuple(replace(m, node_name=None) for m in MEMBERS))
    pod = manifests.workload_manifests(spec)[1]["spec"]["template"]["spec"]
    assert "kubernetes.io/hostname" not in pod["nodeSelector"]
    assert "kubernetes.io/hostname" not in str(pod["affinity"].get("nodeAffinity"))
    assert "podAntiAffinity" in pod["affinity"], "still one rank per node"


def test_a_dra_gang_has_one_claim_template_of_the_per_node_cards() -> None:
    bodies = manifests.workload_manifests(gang_spec(allocation="dra"))
    assert [b["kind"] for b in bodies] == ["ResourceClaimTemplate", "Service", "Job"]
    assert "4" in str(bodies[0]["spec"]) and "12" not in str(bodies[0]["spec"])


@pytest.mark.parametrize(
    "changes",
    [
        {"gang": (GangMember("a", 12),)},
        {"gang": MEMBERS, "gpu_count": 11},
        {"gang": (GangMember("a", 6), GangMember("a", 6))},
        {"gang": (GangMember("a", 12), GangMember("b", 0))},
        {"gang": (GangMember("a", 8), GangMember("b", 4)), "gpu_count": 12},
        {"gang": MEMBERS, "kind": "notebook"},
    ],
)
def test_gang_specs_that_cannot_run_are_refused(changes: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        workload(**{"kind": "job", "sharing": "exclusive", "gpu_count": 12, **changes})


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
    """A pod of the gang's indexed Job, with the index the Job controller gives it."""
    state = {"terminated": terminated} if terminated else {"running": {"startedAt": T1}}
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"gpr-812-a1-{rank}-x",
            "namespace": NAMESPACE,
            "creationTimestamp": T0,
            "labels": {**r.LABELS, GANG_SIZE_LABEL: "3", COMPLETION_INDEX_ANNOTATION: str(rank)},
            "annotations": {COMPLETION_INDEX_ANNOTATION: str(rank)},
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


def gang_of(*pods: Any, conditions: list[dict[str, Any]] | None = None) -> Any:
    """The gang's status from its indexed Job (with `conditions`) and `pods`."""
    job: Any = r.job(conditions)
    job.metadata.labels = {**job.metadata.labels, GANG_SIZE_LABEL: "3"}
    return gang_status(namespace=NAMESPACE, request_id="812", attempt=1, jobs=[job], pods=pods)


def test_a_gang_runs_when_every_rank_runs() -> None:
    status = gang_of(*(rank_pod(i, "Running", node=f"n{i}") for i in (2, 0, 1)))
    assert (status.phase, status.gang_size, status.name) == ("running", 3, "gpr-812-a1")
    assert status.node_names == ("n0", "n1", "n2") and status.node_name == "n0"


def test_a_gang_waits_while_a_rank_has_no_pod() -> None:
    status = gang_of(rank_pod(0, "Running", node="n0"), rank_pod(2, "Running", node="n2"))
    assert (status.phase, status.reason) == ("pending", "NoPod")
    assert status.message.startswith("rank 1")


def test_a_waiting_gang_names_the_rank_no_node_took_before_a_starting_one() -> None:
    starting = rank_pod(0, "Pending", node="n0")
    starting.status.container_statuses[0].state = k8s.V1ContainerState(
        waiting=k8s.V1ContainerStateWaiting(reason="ContainerCreating")
    )
    stuck = rank_pod(2, "Pending", node="")
    stuck.spec.node_name = None
    stuck.status.container_statuses = None
    stuck.status.conditions = [
        k8s.V1PodCondition(
            type="PodScheduled",
            status="False",
            reason="Unschedulable",
            message="0/3 nodes are available: 1 node(s) were unschedulable.",
        )
    ]
    status = gang_of(starting, rank_pod(1, "Running", node="n1"), stuck)
    assert (status.phase, status.reason) == ("pending", "Unschedulable")
    assert status.message == "rank 2: 0/3 nodes are available: 1 node(s) were unschedulable."
    assert status.node_names == ("n0", "n1", "")


def test_a_gang_with_a_failed_rank_has_failed_and_says_which() -> None:
    crash = {"exitCode": 1, "reason": "Error", "startedAt": T1, "finishedAt": T2}
    status = gang_of(
        rank_pod(0, "Running", node="n0"),
        rank_pod(1, "Failed", node="n1", terminated=crash),
        rank_pod(2, "Running", node="n2"),
    )
    assert status.phase == "failed" and status.reason == "Error"
    assert status.message.startswith("rank 1 on n1: container main exited with code 1")
    assert status.exit_code == 1


def test_a_failed_indexed_job_names_the_rank_whose_pod_ended_first() -> None:
    first = {"exitCode": 3, "reason": "Error", "startedAt": T1, "finishedAt": T1}
    stopped = {"exitCode": 143, "reason": "Error", "startedAt": T1, "finishedAt": T2}
    failed = r.condition("Failed", reason="BackoffLimitExceeded", message="backoff limit")
    status = gang_of(
        rank_pod(0, "Failed", node="n0", terminated=stopped),
        rank_pod(2, "Failed", node="n2", terminated=first),
        conditions=[failed],
    )
    assert (status.phase, status.reason, status.exit_code) == ("failed", "BackoffLimitExceeded", 3)
    assert status.message.startswith("rank 2 on n2")


def test_a_gang_succeeds_with_its_indexed_job() -> None:
    done = {"exitCode": 0, "reason": "Completed", "startedAt": T1, "finishedAt": T2}
    status = gang_of(
        *(rank_pod(i, "Succeeded", node=f"n{i}", terminated=done) for i in range(3)),
        conditions=[r.condition("Complete")],
    )
    assert (status.phase, status.gang_size) == ("succeeded", 3)


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


def test_gang_launch_creates_the_service_and_the_indexed_job_once(
    backend: KubernetesClusterBackend, server: FakeApiServer
) -> None:
    assert backend.launch(gang_spec()) == "gpr-812-a1"
    assert backend.launch(gang_spec()) == "gpr-812-a1", "a repeat adopts"
    assert sorted(p for p in server.objects if p != NS_PATH) == [
        f"{NS_PATH}/services/gpr-812-a1",
        f"{JOBS}/gpr-812-a1",
    ]
    assert len(server.calls("POST")) == 2 + 2


def test_gang_launch_is_all_or_nothing(
    backend: KubernetesClusterBackend, server: FakeApiServer
) -> None:
    server.fail("POST", r"/jobs$", 422, times=1, reason="Invalid")
    with pytest.raises(PermanentClusterError):
        backend.launch(gang_spec())
    assert set(server.objects) == {NS_PATH}, "the Service was deleted again"


def test_terminate_deletes_the_job_the_service_and_the_pods(
    backend: KubernetesClusterBackend, server: FakeApiServer
) -> None:
    backend.launch(gang_spec())
    server.put(f"{NS_PATH}/pods/gpr-812-a1-1-x", {"metadata": {"labels": r.LABELS}})
    backend.terminate(NAMESPACE, "812", 1, reason="a rank failed", grace_seconds=0)
    assert set(server.objects) == {NS_PATH}
    patched = {p for m, p in server.calls("PATCH")}
    assert f"{JOBS}/gpr-812-a1" in patched, "the reason is recorded"


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
