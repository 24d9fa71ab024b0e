"""Workloads against the real control plane: the real scheduler binds them to kwok nodes, the
real Job controller finishes them, the backend reads the outcome."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.cluster.base import TransientClusterError, WorkloadStatus
from tests.k8s.conftest import Admin, eventually
from tests.k8s.helpers import FAIL_LABEL, FAIL_PREFIX, job, runs_for

pytestmark = pytest.mark.k8s


def status_of(backend: Any, namespace: str, spec: Any) -> WorkloadStatus:
    result: WorkloadStatus = backend.get_workload(namespace, spec.request_id, spec.attempt)
    return result


def test_whole_card_job_is_bound_by_the_scheduler_and_completed_by_kwok(
    k8s_backend: Any, k8s_project: str
) -> None:
    spec = job(k8s_project, gpu_count=2, annotations=runs_for("3s"))
    assert k8s_backend.launch(spec) == spec.name

    running = eventually(
        lambda: (s := status_of(k8s_backend, k8s_project, spec)).phase == "running" and s,
        what="the job running",
    )
    assert running.node_name in ("a100-training-1", "a100-training-2")
    assert running.kind == "job" and running.started_at is not None

    done = eventually(
        lambda: (s := status_of(k8s_backend, k8s_project, spec)).is_finished and s,
        what="the job finished",
    )
    assert (done.phase, done.reason) == ("succeeded", "Completed")
    assert done.finished_at is not None
    assert done.team_slug == "vision" and done.project_slug == "detection"


@pytest.mark.parametrize(
    ("pool", "sharing", "extra", "nodes"),
    [
        ("h100-mig", "mig", {"mig_profile": "1g.10gb"}, ("h100-mig-1",)),
        # The default scheduler counts HAMi's extended resources like any other.
        (
            "l4-vgpu",
            "vgpu",
            {"vgpu_memory_mib": 6144, "vgpu_cores_percent": 25},
            ("l4-vgpu-1", "l4-vgpu-2"),
        ),
    ],
)
def test_mig_and_vgpu_jobs_fit_the_nodes_that_advertise_their_resources(
    k8s_backend: Any,
    k8s_project: str,
    pool: str,
    sharing: Any,
    extra: dict[str, Any],
    nodes: tuple[str, ...],
) -> None:
    spec = job(k8s_project, pool=pool, sharing=sharing, gpu_count=1, **extra)
    k8s_backend.launch(spec)
    done = eventually(
        lambda: (s := status_of(k8s_backend, k8s_project, spec)).is_finished and s,
        what=f"the {sharing} job finished",
    )
    assert done.phase == "succeeded"
    assert done.node_name in nodes


def test_failing_container_fails_the_workload_with_the_reason(
    k8s_backend: Any, k8s_project: str
) -> None:
    spec = job(
        k8s_project,
        labels={FAIL_LABEL: "true"},
        annotations={
            FAIL_PREFIX + "reason": "OOMKilled",
            FAIL_PREFIX + "message": "out of GPU memory",
            FAIL_PREFIX + "exit-code": "137",
        },
    )
    k8s_backend.launch(spec)
    failed = eventually(
        lambda: (s := status_of(k8s_backend, k8s_project, spec)).is_finished and s,
        what="the job failed",
    )
    assert failed.phase == "failed"
    text = f"{failed.reason} {failed.message}"
    assert "137" in text or "OOMKilled" in text, failed


def test_more_gpus_than_any_node_has_stays_pending_with_the_schedulers_reason(
    k8s_backend: Any, k8s_project: str
) -> None:
    spec = job(k8s_project, gpu_count=9)
    k8s_backend.launch(spec)
    pending = eventually(
        lambda: (s := status_of(k8s_backend, k8s_project, spec)).reason == "Unschedulable" and s,
        what="Unschedulable",
    )
    assert pending.phase == "pending"
    assert "nvidia.com/gpu" in pending.message


def test_terminate_deletes_the_workload_and_twice_is_fine(
    k8s_backend: Any, k8s_project: str, k8s_admin: Admin
) -> None:
    spec = job(k8s_project, annotations=runs_for("1h"))
    k8s_backend.launch(spec)
    eventually(lambda: status_of(k8s_backend, k8s_project, spec).phase == "running")

    k8s_backend.terminate(
        k8s_project, spec.request_id, spec.attempt, reason="cancelled", grace_seconds=0
    )
    k8s_backend.terminate(
        k8s_project, spec.request_id, spec.attempt, reason="cancelled", grace_seconds=0
    )
    gone = eventually(
        lambda: (s := status_of(k8s_backend, k8s_project, spec)).phase == "missing" and s,
        what="the workload gone",
    )
    assert gone.reason == "NotFound"
    assert not k8s_admin.core.list_namespaced_pod(k8s_project).items


def test_notebook_deployment_and_service_run_and_terminate(
    k8s_backend: Any, k8s_project: str, k8s_admin: Admin
) -> None:
    spec = job(k8s_project, kind="notebook", max_runtime_seconds=None)
    k8s_backend.launch(spec)
    running = eventually(
        lambda: (s := status_of(k8s_backend, k8s_project, spec)).phase == "running" and s,
        what="the notebook running",
    )
    assert running.kind == "notebook"
    service = k8s_admin.core.read_namespaced_service(spec.name, k8s_project)
    assert service.spec.ports[0].port == 8888
    k8s_backend.terminate(k8s_project, spec.request_id, spec.attempt, reason="done")
    eventually(lambda: status_of(k8s_backend, k8s_project, spec).phase == "missing")
    assert not k8s_admin.core.list_namespaced_service(k8s_project).items


def test_a_duplicated_launch_creates_no_second_job(
    k8s_backend: Any, k8s_project: str, k8s_admin: Admin
) -> None:
    spec = job(k8s_project, annotations=runs_for("1h"))
    k8s_backend.launch(spec)
    first = k8s_admin.batch.read_namespaced_job(spec.name, k8s_project).metadata.uid
    assert k8s_backend.launch(spec) == spec.name
    jobs = k8s_admin.batch.list_namespaced_job(k8s_project).items
    assert [j.metadata.uid for j in jobs] == [first]
    eventually(lambda: status_of(k8s_backend, k8s_project, spec).phase == "running")
    pods = k8s_admin.core.list_namespaced_pod(k8s_project).items
    assert len(pods) == 1
    k8s_backend.terminate(k8s_project, spec.request_id, spec.attempt, reason="t", grace_seconds=0)


def test_list_workloads_groups_jobs_and_pods_per_attempt(
    k8s_backend: Any, k8s_project: str
) -> None:
    specs = [job(k8s_project, annotations=runs_for("1h")) for _ in range(3)]
    for spec in specs:
        k8s_backend.launch(spec)
    listed = eventually(
        lambda: (
            (ws := [w for w in k8s_backend.list_workloads([k8s_project]) if w.phase == "running"])
            and len(ws) == 3
            and ws
        ),
        what="three running workloads",
    )
    assert sorted(w.request_id for w in listed) == sorted(s.request_id for s in specs)
    everywhere = {(w.namespace, w.request_id) for w in k8s_backend.list_workloads()}
    assert {(k8s_project, s.request_id) for s in specs} <= everywhere
    for spec in specs:
        k8s_backend.terminate(k8s_project, spec.request_id, 1, reason="t", grace_seconds=0)


def test_an_unreachable_api_server_is_a_transient_error(k8s_testbed: Any, tmp_path: Any) -> None:
    from runtime.cluster.kubernetes import KubernetesClusterBackend
    from scripts.testbed.cluster import PORTAL_TOKEN, write_kubeconfig
    from scripts.testbed.ports import free_port

    # The test bed's CA and token, a port nobody listens on.
    kubeconfig = tmp_path / "nowhere.kubeconfig"
    write_kubeconfig(
        kubeconfig,
        server=f"https://127.0.0.1:{free_port()}",
        ca_file=k8s_testbed.workdir / "ca.crt",
        token=PORTAL_TOKEN,
        user="gpu-portal",
    )
    backend = KubernetesClusterBackend(kubeconfig=str(kubeconfig), request_timeout_seconds=2)
    with pytest.raises(TransientClusterError):
        backend.sync_inventory()
