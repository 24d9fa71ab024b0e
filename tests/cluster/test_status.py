"""Mapping recorded Job, Deployment and Pod shapes onto the portal's workload phases."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from runtime.cluster.kubernetes_status import workload_status
from tests.cluster import recorded as r


def status(**objects: Any) -> Any:
    return workload_status(namespace=r.NAMESPACE, request_id="812", attempt=1, **objects)


def test_nothing_at_all_is_missing() -> None:
    result = status()
    assert result.phase == "missing"
    assert result.name == "gpr-812-a1"


def test_complete_job_succeeded_with_its_completion_time() -> None:
    job = r.job(
        [r.condition("SuccessCriteriaMet"), r.condition("Complete")],
        completionTime="2026-12-01T10:45:03Z",
        startTime="2026-12-01T10:00:00Z",
    )
    pod = r.pod(phase="Succeeded", containers=[r.container_status(r.terminated(0, "Completed"))])
    result = status(job=job, pods=[pod])
    assert (result.phase, result.reason) == ("succeeded", "Completed")
    assert result.kind == "job"
    assert result.finished_at == datetime(2026, 12, 1, 10, 45, 3, tzinfo=UTC)
    assert result.started_at == datetime(2026, 12, 1, 10, 2, tzinfo=UTC)
    assert result.node_name == "gpu-a100-01"
    assert (result.team_slug, result.project_slug) == ("vision", "detection")
    assert result.is_finished


def test_job_past_its_deadline_failed_with_deadline_exceeded() -> None:
    job = r.job(
        [
            r.condition("FailureTarget", reason="DeadlineExceeded", message="x"),
            r.condition(
                "Failed",
                reason="DeadlineExceeded",
                message="Job was active longer than specified deadline",
            ),
        ]
    )
    result = status(job=job, pods=[])
    assert (result.phase, result.reason) == ("failed", "DeadlineExceeded")
    assert result.message == "Job was active longer than specified deadline"
    assert result.finished_at == datetime(2026, 12, 1, 11, 0, tzinfo=UTC)


def test_job_that_hit_its_backoff_limit_failed_with_the_containers_exit() -> None:
    job = r.job(
        [
            r.condition(
                "Failed",
                reason="BackoffLimitExceeded",
                message="Job has reached the specified backoff limit",
            )
        ],
        failed=1,
    )
    pod = r.pod(phase="Failed", containers=[r.container_status(r.terminated(137, "OOMKilled"))])
    result = status(job=job, pods=[pod])
    assert (result.phase, result.reason) == ("failed", "BackoffLimitExceeded")
    assert "OOMKilled" not in result.reason
    assert "container main exited with code 137" in result.message
    assert result.finished_at == datetime(2026, 12, 1, 10, 45, tzinfo=UTC)


def test_failed_pod_before_the_job_notices_is_already_failed() -> None:
    pod = r.pod(phase="Failed", containers=[r.container_status(r.terminated(1, "Error"))])
    result = status(job=r.job(active=1), pods=[pod])
    assert (result.phase, result.reason) == ("failed", "Error")
    assert result.message == "container main exited with code 1"


def test_evicted_job_pod_failed_with_the_eviction_reason() -> None:
    pod = r.pod(
        phase="Failed",
        reason="Evicted",
        message="The node was low on resource: memory.",
        containers=[],
    )
    result = status(job=r.job(), pods=[pod])
    assert (result.phase, result.reason) == ("failed", "Evicted")
    assert result.message == "The node was low on resource: memory."


@pytest.mark.parametrize(
    ("reason", "message", "words"),
    [
        (
            "InvalidImageName",
            'Failed to apply default image tag "Registry/Train:1": invalid reference format',
            "image name is invalid: ",
        ),
        (
            "CrashLoopBackOff",
            "back-off 5m0s restarting failed container=main pod=gpr-812-a1-x7k2p",
            "container keeps crashing: ",
        ),
        (
            "CreateContainerConfigError",
            'secret "hf-token" not found',
            "container configuration is invalid: ",
        ),
    ],
)
@pytest.mark.parametrize("kind", ["job", "notebook"])
def test_stuck_containers_fail_the_workload_with_a_clear_reason(
    reason: str, message: str, words: str, kind: str
) -> None:
    pod = r.pod(
        phase="Pending" if reason != "CrashLoopBackOff" else "Running",
        kind=kind,
        conditions=[r.SCHEDULED],
        containers=[r.container_status(r.waiting(reason, message), restarts=3)],
    )
    owner: dict[str, Any] = (
        {"job": r.job(active=1)} if kind == "job" else {"deployment": r.deployment()}
    )
    result = status(pods=[pod], **owner)
    assert (result.phase, result.reason) == ("failed", reason)
    assert result.message == words + message


@pytest.mark.parametrize(
    ("reason", "message"),
    [
        (
            "ErrImagePull",
            'failed to pull and unpack image "registry.example.com/vision/train:1.4": not found',
        ),
        ("ImagePullBackOff", 'Back-off pulling image "registry.example.com/vision/train:1.4"'),
    ],
)
@pytest.mark.parametrize("kind", ["job", "notebook"])
def test_an_image_that_cannot_be_pulled_keeps_the_workload_pending_naming_the_image(
    reason: str, message: str, kind: str
) -> None:
    # It may still come (the registry back, a pull secret added): the portal decides how long.
    pod = r.pod(
        phase="Pending",
        kind=kind,
        conditions=[r.SCHEDULED],
        containers=[r.container_status(r.waiting(reason, message))],
    )
    owner: dict[str, Any] = (
        {"job": r.job(active=1)} if kind == "job" else {"deployment": r.deployment()}
    )
    result = status(pods=[pod], **owner)
    assert (result.phase, result.reason) == ("pending", reason)
    assert result.message == f"cannot pull image registry.example.com/vision/train:1.4: {message}"
    assert result.node_name == "gpu-a100-01"


def test_a_crash_loop_says_how_the_container_last_exited() -> None:
    container = r.container_status(
        r.waiting("CrashLoopBackOff", "back-off 40s restarting failed container=main"),
        restarts=2,
    )
    container["lastState"] = r.terminated(137, "OOMKilled")
    pod = r.pod(phase="Running", kind="notebook", conditions=[r.SCHEDULED], containers=[container])
    result = status(pods=[pod], deployment=r.deployment())
    assert (result.phase, result.reason) == ("failed", "CrashLoopBackOff")
    assert result.message == (
        "container keeps crashing: container main exited with code 137 (OOMKilled); "
        "back-off 40s restarting failed container=main"
    )
    assert (result.exit_code, result.exit_reason) == (137, "OOMKilled")


def test_unschedulable_pod_is_pending_with_the_schedulers_message() -> None:
    pod = r.pod(phase="Pending", conditions=[r.UNSCHEDULABLE], node=None)
    result = status(job=r.job(active=1), pods=[pod])
    assert (result.phase, result.reason) == ("pending", "Unschedulable")
    assert result.message.startswith("0/12 nodes are available: 4 Insufficient nvidia.com/gpu")
    assert result.node_name is None


def test_pod_pulling_its_image_is_pending_with_the_waiting_reason() -> None:
    pod = r.pod(
        phase="Pending",
        conditions=[r.SCHEDULED],
        containers=[r.container_status(r.waiting("ContainerCreating", ""))],
    )
    result = status(job=r.job(active=1), pods=[pod])
    assert (result.phase, result.reason) == ("pending", "ContainerCreating")


def test_job_without_a_pod_yet_is_pending() -> None:
    result = status(job=r.job())
    assert (result.phase, result.reason) == ("pending", "NoPod")


def test_running_job_pod_is_running_since_its_container_started() -> None:
    pod = r.pod(
        phase="Running",
        conditions=[r.SCHEDULED],
        containers=[r.container_status(r.RUNNING, ready=True)],
        startTime="2026-12-01T10:00:30Z",
    )
    result = status(job=r.job(active=1), pods=[pod])
    assert result.phase == "running"
    assert result.started_at == datetime(2026, 12, 1, 10, 2, tzinfo=UTC)


def test_succeeded_pod_of_an_unfinished_job_is_still_running() -> None:
    pod = r.pod(phase="Succeeded", containers=[r.container_status(r.terminated(0, "Completed"))])
    result = status(job=r.job(active=0), pods=[pod])
    assert (result.phase, result.reason) == ("running", "Completing")


def test_available_deployment_is_running() -> None:
    deployment = r.deployment(
        [r.condition("Available", reason="MinimumReplicasAvailable")],
        readyReplicas=1,
        availableReplicas=1,
    )
    pod = r.pod(
        phase="Running",
        kind="notebook",
        containers=[r.container_status(r.RUNNING, ready=True)],
        name="gpr-812-a1-7d9f8c6b5-abcde",
    )
    result = status(deployment=deployment, pods=[pod])
    assert result.phase == "running"
    assert result.kind == "notebook"


def test_a_resumed_deployment_is_not_running_on_the_availability_it_had_at_zero() -> None:
    # Scaled back up from zero: until its controller has seen that, the status still says
    # Available (0 of 0 replicas needed), with no replica available.
    deployment = r.deployment(
        [r.condition("Available", reason="MinimumReplicasAvailable")], observedGeneration=3
    )
    result = status(deployment=deployment, pods=[])
    assert (result.phase, result.reason) == ("pending", "NoPod")


def test_deployment_blocked_by_quota_is_pending_with_the_replica_failure() -> None:
    message = (
        'pods "gpr-812-a1-7d9f8c6b5-abcde" is forbidden: exceeded quota: gpu-portal-quota, '
        "requested: requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=8, limited: "
        "requests.nvidia.com/gpu=8"
    )
    deployment = r.deployment(
        [
            r.condition("Available", "False", "MinimumReplicasUnavailable"),
            r.condition("ReplicaFailure", reason="FailedCreate", message=message),
        ]
    )
    result = status(deployment=deployment, pods=[])
    assert (result.phase, result.reason) == ("pending", "FailedCreate")
    assert "exceeded quota" in result.message


def test_newest_pod_speaks_for_a_deployment_that_replaced_one() -> None:
    old = r.pod(
        phase="Failed",
        kind="notebook",
        reason="Evicted",
        name="gpr-812-a1-7d9f8c6b5-old00",
        created="2026-12-01T09:00:00Z",
    )
    new = r.pod(
        phase="Pending",
        kind="notebook",
        conditions=[r.UNSCHEDULABLE],
        node=None,
        name="gpr-812-a1-7d9f8c6b5-new00",
        created="2026-12-01T10:30:00Z",
    )
    result = status(deployment=r.deployment(), pods=[old, new])
    assert (result.phase, result.reason) == ("pending", "Unschedulable")


def test_orphan_pods_without_their_owner_are_still_reported() -> None:
    pod = r.pod(phase="Running", containers=[r.container_status(r.RUNNING, ready=True)])
    result = status(pods=[pod])
    assert result.phase == "running"
    assert result.kind == "job"


def test_pending_workload_has_not_started_even_if_the_kubelet_accepted_the_pod() -> None:
    pod = r.pod(
        phase="Pending",
        conditions=[r.SCHEDULED],
        containers=[r.container_status(r.waiting("ContainerCreating", ""))],
        startTime="2026-12-01T10:00:30Z",
    )
    assert status(job=r.job(active=1), pods=[pod]).started_at is None


def test_a_pod_being_deleted_does_not_speak_for_its_replacement() -> None:
    dying = r.pod(
        phase="Running",
        kind="notebook",
        containers=[r.container_status(r.waiting("CrashLoopBackOff", "back-off"))],
        name="gpr-812-a1-7d9f8c6b5-old00",
        created="2026-12-01T11:00:00Z",
        deleted="2026-12-01T11:05:00Z",
    )
    fresh = r.pod(
        phase="Running",
        kind="notebook",
        containers=[r.container_status(r.RUNNING, ready=True)],
        name="gpr-812-a1-7d9f8c6b5-new00",
        node="gpu-a100-02",
        created="2026-12-01T10:59:00Z",
    )
    result = status(deployment=r.deployment(), pods=[dying, fresh])
    assert (result.phase, result.node_name) == ("running", "gpu-a100-02")
