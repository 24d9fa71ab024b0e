"""After a launch: patching a deadline, the quota's refusal of a Job, GPUs held by pods the
portal did not create, and the access check of a node against its pool's sharing mode."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from runtime.cluster import names, project_manifests
from runtime.cluster.base import NodeInventory, WorkloadStatus
from runtime.cluster.kubernetes import KubernetesClusterBackend
from runtime.cluster.kubernetes_nodes import foreign_gpu_usage, foreign_host_usage
from runtime.cluster.kubernetes_status import job_deadline_seconds, with_failed_create
from runtime.services.inventory import access_problem
from scheduling.choices import SharingMode
from scheduling.models import NodePool
from tests.cluster import recorded as r
from tests.cluster.fake_api import FakeApiServer
from tests.cluster.specs import NAMESPACE, project, workload

NS_PATH = f"/api/v1/namespaces/{NAMESPACE}"
JOB_PATH = f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/gpr-812-a1"
DEPLOYMENT_PATH = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/gpr-812-a1"


@pytest.fixture
def server() -> FakeApiServer:
    fake = FakeApiServer()
    fake.put(NS_PATH, project_manifests.namespace_manifest(project()))
    return fake


@pytest.fixture
def backend(server: FakeApiServer) -> KubernetesClusterBackend:
    return KubernetesClusterBackend(api_client=server.api_client())


# Deadlines ------------------------------------------------------------------------------------


def test_set_deadline_patches_the_jobs_active_deadline_and_annotation(
    backend: KubernetesClusterBackend, server: FakeApiServer
) -> None:
    backend.launch(workload("job", max_runtime_seconds=3600))
    assert server.objects[JOB_PATH]["spec"]["activeDeadlineSeconds"] == 3600
    backend.set_deadline(NAMESPACE, "812", 1, max_runtime_seconds=7200)
    backend.set_deadline(NAMESPACE, "812", 1, max_runtime_seconds=7200)  # a repeat is the same
    job = server.objects[JOB_PATH]
    assert job["spec"]["activeDeadlineSeconds"] == 7200
    assert job["metadata"]["annotations"][names.MAX_RUNTIME_ANNOTATION] == "7200"
    patches = [call for call in server.calls("PATCH")]
    assert patches == [("PATCH", JOB_PATH)] * 2


def test_a_job_waiting_for_a_node_keeps_its_whole_runtime_once_its_pod_runs(
    backend: KubernetesClusterBackend, server: FakeApiServer
) -> None:
    # The Job controller counts from the Job's start: created with room to wait for a node...
    backend.launch(workload("job", max_runtime_seconds=3600, start_allowance_seconds=1800))
    assert server.objects[JOB_PATH]["spec"]["activeDeadlineSeconds"] == 5400
    # ...a lead's extension before it runs keeps that room...
    backend.set_deadline(NAMESPACE, "812", 1, max_runtime_seconds=4000)
    assert server.objects[JOB_PATH]["spec"]["activeDeadlineSeconds"] == 5800
    # ...and once its pod ran 12 min 0.4 s after the Job started, it gets the max runtime
    # from then on.
    server.objects[JOB_PATH]["status"] = {"startTime": "2026-12-01T10:00:00Z"}
    running_since = datetime(2026, 12, 1, 10, 12, 0, 400_000, tzinfo=UTC)
    backend.set_deadline(NAMESPACE, "812", 1, max_runtime_seconds=4000, running_since=running_since)
    assert server.objects[JOB_PATH]["spec"]["activeDeadlineSeconds"] == 721 + 4000


def test_a_job_deadline_counts_from_the_pods_start_not_the_jobs() -> None:
    job = r.job(startTime="2026-12-01T10:00:00Z")
    later = datetime(2026, 12, 1, 10, 30, tzinfo=UTC)
    assert job_deadline_seconds(job, max_runtime_seconds=600, running_since=later) == 1800 + 600
    # A clock a little behind the API server's never takes time away.
    early = datetime(2026, 12, 1, 9, 59, 58, tzinfo=UTC)
    assert job_deadline_seconds(job, max_runtime_seconds=600, running_since=early) == 600
    # Suspended in Kueue (no start time yet): the allowance the Job has is kept.
    waiting = r.job()
    assert waiting.spec is not None and waiting.metadata is not None
    waiting.spec.active_deadline_seconds = 2400
    waiting.metadata.annotations = {names.MAX_RUNTIME_ANNOTATION: "600"}
    assert job_deadline_seconds(waiting, max_runtime_seconds=900, running_since=later) == 2700


def test_set_deadline_of_a_notebook_changes_only_its_annotation(
    backend: KubernetesClusterBackend, server: FakeApiServer
) -> None:
    backend.launch(workload("notebook", max_runtime_seconds=3600))
    backend.set_deadline(NAMESPACE, "812", 1, max_runtime_seconds=5400)
    deployment = server.objects[DEPLOYMENT_PATH]
    assert deployment["metadata"]["annotations"][names.MAX_RUNTIME_ANNOTATION] == "5400"
    assert "activeDeadlineSeconds" not in deployment["spec"]["template"]["spec"]


def test_set_deadline_of_a_workload_that_is_gone_does_nothing(
    backend: KubernetesClusterBackend, server: FakeApiServer
) -> None:
    backend.set_deadline(NAMESPACE, "812", 1, max_runtime_seconds=7200)
    assert server.calls("PATCH") == []


# The quota's refusal of a Job ------------------------------------------------------------------


def event(message: str, at: str) -> Any:
    return r.deserialize(
        {
            "metadata": {"name": f"gpr-812-a1.{at[-3:-1]}", "namespace": NAMESPACE},
            "involvedObject": {"kind": "Job", "name": "gpr-812-a1", "namespace": NAMESPACE},
            "reason": "FailedCreate",
            "message": message,
            "lastTimestamp": at,
            "type": "Warning",
        },
        "CoreV1Event",
    )


def pending(reason: str) -> WorkloadStatus:
    return WorkloadStatus(
        request_id="812", attempt=1, phase="pending", namespace=NAMESPACE, name="x", reason=reason
    )


def test_a_job_without_a_pod_says_why_from_its_newest_failed_create_event() -> None:
    events = [
        event("Error creating: pods is forbidden: old", "2026-12-01T10:00:05Z"),
        event(
            'Error creating: pods "gpr-812-a1-x" is forbidden: exceeded quota: '
            "gpu-portal-quota, requested: requests.nvidia.com/gpu=1",
            "2026-12-01T10:00:09Z",
        ),
    ]
    status = with_failed_create(pending("NoPod"), events)
    assert status.reason == "FailedCreate"
    assert "exceeded quota" in status.message and "requests.nvidia.com/gpu=1" in status.message
    assert with_failed_create(pending("NoPod"), []).reason == "NoPod"
    assert with_failed_create(pending("Unschedulable"), events).reason == "Unschedulable"


# GPUs held by others ---------------------------------------------------------------------------


def other_pod(
    name: str,
    limits: dict[str, str],
    *,
    node: str | None = "gpu-1",
    phase: str = "Running",
    labels: dict[str, str] | None = None,
) -> Any:
    return r.deserialize(
        {
            "metadata": {"name": name, "namespace": "other", "labels": labels or {}},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "main", "image": "x", "resources": {"limits": limits}}],
            },
            "status": {"phase": phase},
        },
        "V1Pod",
    )


def test_foreign_gpu_usage_adds_up_bound_unfinished_pods_without_portal_labels() -> None:
    pods = [
        other_pod("whole", {"nvidia.com/gpu": "2", "cpu": "4"}),
        other_pod("whole-2", {"nvidia.com/gpu": "1"}),
        # HAMi: memory and cores are per card, so 2 cards of 4000 MiB and 30 % each.
        other_pod(
            "vgpu",
            {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "4000", "nvidia.com/gpucores": "30"},
            node="l4-1",
        ),
        other_pod("mig", {"nvidia.com/mig-1g.10gb": "3"}, node="h100-1"),
        other_pod("portal", {"nvidia.com/gpu": "4"}, labels={**r.LABELS}),
        other_pod("done", {"nvidia.com/gpu": "4"}, phase="Succeeded"),
        other_pod("unbound", {"nvidia.com/gpu": "4"}, node=None, phase="Pending"),
        other_pod("no-gpu", {"cpu": "1"}),
    ]
    assert foreign_gpu_usage(pods) == {
        "gpu-1": {"nvidia.com/gpu": 3},
        "l4-1": {"nvidia.com/gpu": 2, "nvidia.com/gpumem": 8000, "nvidia.com/gpucores": 60},
        "h100-1": {"nvidia.com/mig-1g.10gb": 3},
    }


def test_foreign_host_usage_adds_up_what_kube_scheduler_counts_against_a_node() -> None:
    def pod(name: str, spec: dict[str, Any], **kw: Any) -> Any:
        return r.deserialize(
            {
                "metadata": {"name": name, "namespace": "other", "labels": kw.get("labels", {})},
                "spec": {"nodeName": kw.get("node", "gpu-1"), **spec},
                "status": {"phase": kw.get("phase", "Running")},
            },
            "V1Pod",
        )

    def container(cpu: str, memory: str) -> dict[str, Any]:
        return {
            "name": "c",
            "image": "x",
            "resources": {"requests": {"cpu": cpu, "memory": memory}},
        }

    pods = [
        # Containers add up: 1.5 CPU and 3 GiB.
        pod("two", {"containers": [container("500m", "1Gi"), container("1", "2Gi")]}),
        # An init container larger than the containers counts instead, plus the overhead.
        pod(
            "init",
            {
                "initContainers": [container("4", "1Gi")],
                "containers": [container("1", "2Gi")],
                "overhead": {"cpu": "250m", "memory": "128Mi"},
            },
        ),
        pod("portal", {"containers": [container("8", "8Gi")]}, labels={**r.LABELS}),
        pod("done", {"containers": [container("8", "8Gi")]}, phase="Succeeded"),
        pod("other-node", {"containers": [container("2", "512Mi")]}, node="gpu-2"),
    ]
    assert foreign_host_usage(pods) == {
        "gpu-1": {"cpu_millicores": 1_500 + 4_250, "memory_mib": 3 * 1024 + 2 * 1024 + 128},
        "gpu-2": {"cpu_millicores": 2_000, "memory_mib": 512},
    }


def test_sync_inventory_lists_only_pods_the_portal_did_not_create(
    backend: KubernetesClusterBackend, server: FakeApiServer
) -> None:
    server.put("/api/v1/nodes/gpu-1", {"metadata": {"name": "gpu-1"}})
    (node,) = backend.sync_inventory()
    assert node.foreign_usage == {}
    pod_lists = [url for url in server.urls if url.startswith("GET /api/v1/pods")]
    assert len(pod_lists) == 1
    assert "labelSelector=app.kubernetes.io/managed-by%21%3Dgpu-portal" in pod_lists[0]
    assert "spec.nodeName%21%3D" in pod_lists[0]


# Access consistency ----------------------------------------------------------------------------


def inventory(allocatable: dict[str, str], **fields: Any) -> NodeInventory:
    mig = {
        name.removeprefix("nvidia.com/mig-"): int(amount)
        for name, amount in allocatable.items()
        if name.startswith("nvidia.com/mig-")
    }
    return NodeInventory(
        name="n1",
        labels={},
        taints=(),
        ready=True,
        schedulable=True,
        allocatable=allocatable,
        capacity=allocatable,
        gpu_model="NVIDIA-L4",
        gpu_count=4,
        gpu_memory_mib=23034,
        mig_devices=mig,
        **fields,
    )


@pytest.mark.parametrize(
    ("mode", "allocatable", "profiles", "problem"),
    [
        (
            "vgpu",
            {"nvidia.com/gpu": "40", "nvidia.com/gpumem": "92136", "nvidia.com/gpucores": "400"},
            [],
            "",
        ),
        ("vgpu", {"nvidia.com/gpu": "4"}, [], "no nvidia.com/gpumem or nvidia.com/gpucores"),
        (
            "vgpu",
            {"nvidia.com/gpu": "40", "nvidia.com/gpumem": "92136"},
            [],
            "no nvidia.com/gpucores",
        ),
        ("mig", {"nvidia.com/mig-1g.10gb": "28"}, ["1g.10gb", "3g.40gb"], ""),
        ("mig", {"nvidia.com/gpu": "8"}, ["1g.10gb"], "no nvidia.com/mig-* resources"),
        ("mig", {"nvidia.com/mig-2g.20gb": "8"}, ["1g.10gb"], "advertises only 2g.20gb"),
        ("mig", {"nvidia.com/mig-2g.20gb": "8"}, [], ""),
        ("exclusive", {"nvidia.com/gpu": "8"}, [], ""),
        (
            "exclusive",
            {"nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "7"},
            [],
            "no nvidia.com/gpu",
        ),
    ],
)
def test_access_problem_names_what_a_node_lacks_for_its_pools_mode(
    mode: str, allocatable: dict[str, str], profiles: list[str], problem: str
) -> None:
    pool = NodePool(slug="p", sharing_mode=mode)
    found = access_problem(inventory(allocatable), pool, profiles)
    assert (problem in found) if problem else found == ""


def test_a_whole_card_pool_refuses_hamis_shares_as_cards() -> None:
    from runtime.cluster.base import HamiDevice

    card = HamiDevice("GPU-1", 10, 23034, 100, "NVIDIA-NVIDIA L4", 0, True)
    node = inventory({"nvidia.com/gpu": "40"}, hami_devices=(card,))
    assert "HAMi's vGPU shares" in access_problem(
        node, NodePool(slug="p", sharing_mode=SharingMode.EXCLUSIVE), []
    )
