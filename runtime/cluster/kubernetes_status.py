"""Reading API objects: workload status from Jobs, Deployments and Pods, a gang's from its
ranks, and the cards HAMi assigned.

Pure functions over the client's V1 models (duck-typed: they only read attributes), so they are
tested from recorded object shapes without a server. The Kubernetes client is imported for type
checking only; at run time the backend's calls (`kubernetes_client` and its parts) load it.
Nodes are read by `kubernetes_nodes`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from runtime.cluster import pod_manifests
from runtime.cluster.names import (
    COMPLETION_INDEX_ANNOTATION,
    GANG_SIZE_LABEL,
    KIND_LABEL,
    MAX_RUNTIME_ANNOTATION,
    PROJECT_LABEL,
    RANK_LABEL,
    SUSPENDED_AT_ANNOTATION,
    SUSPENDED_REPLICAS_ANNOTATION,
    TEAM_LABEL,
    workload_name,
)
from runtime.cluster.reports import IMAGE_PULL_REASONS, WorkloadPhase, WorkloadStatus
from runtime.cluster.specs import WORKLOAD_KINDS, WorkloadKind

if TYPE_CHECKING:
    from kubernetes import client as k8s

# Waiting reasons that will not clear up by themselves, with the words the owner sees.
FATAL_WAITING_REASONS: Mapping[str, str] = {
    "InvalidImageName": "image name is invalid",
    "CrashLoopBackOff": "container keeps crashing",
    "CreateContainerConfigError": "container configuration is invalid",
    "CreateContainerError": "container could not be created",
    "RunContainerError": "container could not be started",
}
_COMPLETE_CONDITIONS = ("Complete", "SuccessCriteriaMet")
_FAILED_CONDITIONS = ("Failed", "FailureTarget")


# Workload status ----------------------------------------------------------------------------


def _conditions(obj: Any) -> list[Any]:
    status = getattr(obj, "status", None)
    return list(getattr(status, "conditions", None) or [])


def _true_condition(obj: Any, types: Sequence[str]) -> Any | None:
    """The first condition of `types` (in that order of preference) whose status is True."""
    conditions = _conditions(obj)
    for type_ in types:
        for condition in conditions:
            if condition.type == type_ and condition.status == "True":
                return condition
    return None


def _available_replicas(deployment: k8s.V1Deployment) -> int:
    """Replicas available, counted only while `Available` holds. The condition alone is not
    enough: a Deployment scaled to zero is Available (0 of 0), and it stays so for a moment after
    a resume scales it back up, before its controller has seen the change."""
    if _true_condition(deployment, ("Available",)) is None or deployment.status is None:
        return 0
    return int(deployment.status.available_replicas or 0)


def _container_statuses(pod: k8s.V1Pod) -> list[k8s.V1ContainerStatus]:
    status = pod.status
    if status is None:
        return []
    return [*(status.init_container_statuses or []), *(status.container_statuses or [])]


def _last_exit(container: k8s.V1ContainerStatus) -> str:
    """How a container that terminated before last exited ("exited with code 137 (OOMKilled)"),
    else ""."""
    last = container.last_state.terminated if container.last_state else None
    if last is None or last.exit_code is None:
        return ""
    return f"exited with code {last.exit_code}" + (f" ({last.reason})" if last.reason else "")


def pod_problem(pod: k8s.V1Pod) -> tuple[str, str] | None:
    """(reason, message) when a container is stuck in a waiting state that will not heal; a
    crash loop says how the container last exited."""
    for container in _container_statuses(pod):
        waiting = container.state.waiting if container.state else None
        reason = (waiting.reason if waiting is not None else None) or ""
        if waiting is not None and reason in FATAL_WAITING_REASONS:
            detail = waiting.message or f"container {container.name} is in {reason}"
            last_exit = _last_exit(container)
            if last_exit:
                detail = f"container {container.name} {last_exit}; {detail}"
            return reason, f"{FATAL_WAITING_REASONS[reason]}: {detail}"
    return None


def pod_pull_error(pod: k8s.V1Pod) -> tuple[str, str] | None:
    """(reason, message) when a container cannot get its image: which image, and the kubelet's
    words ("cannot pull image registry.example/x:1: ... not found")."""
    for container in _container_statuses(pod):
        waiting = container.state.waiting if container.state else None
        reason = (waiting.reason if waiting is not None else None) or ""
        if waiting is not None and reason in IMAGE_PULL_REASONS:
            image = container.image or f"of container {container.name}"
            detail = waiting.message or f"container {container.name} is in {reason}"
            return reason, f"cannot pull image {image}: {detail}"
    return None


def pod_termination(pod: k8s.V1Pod) -> tuple[str, str] | None:
    """(reason, message) of the first container that terminated unsuccessfully."""
    for container in _container_statuses(pod):
        terminated = container.state.terminated if container.state else None
        if terminated is not None and terminated.exit_code != 0:
            reason = terminated.reason or "Error"
            detail = f"container {container.name} exited with code {terminated.exit_code}"
            if terminated.message:
                detail = f"{detail}: {terminated.message}"
            return reason, detail
    if pod.status is not None and pod.status.phase == "Failed":
        return pod.status.reason or "Failed", pod.status.message or "the pod failed"
    return None


def pod_exit_code(pod: k8s.V1Pod | None) -> int | None:
    """The exit code of the pod's main container once it has exited (now or last time)."""
    return pod_exit(pod)[0]


def pod_exit(pod: k8s.V1Pod | None) -> tuple[int | None, str]:
    """(exit code, reason) of the pod's main container's last exit (now or last time), e.g.
    (137, "OOMKilled"); (None, "") before it has exited."""
    if pod is None:
        return None, ""
    for container in _container_statuses(pod):
        if container.name != "main":
            continue
        for state in (container.state, container.last_state):
            terminated = state.terminated if state is not None else None
            if terminated is not None and terminated.exit_code is not None:
                return int(terminated.exit_code), str(terminated.reason or "")
    return None, ""


def pod_unschedulable(pod: k8s.V1Pod) -> str | None:
    """The scheduler's message when it could not place a pending pod."""
    for condition in _conditions(pod):
        if (
            condition.type == "PodScheduled"
            and condition.status == "False"
            and condition.reason == "Unschedulable"
        ):
            return str(condition.message or "no node fits the pod")
    return None


def suspended_since(deployment: k8s.V1Deployment | None) -> datetime | None:
    """When reclamation scaled this Deployment to zero; None when it is not suspended (no
    annotation, or someone scaled it up again by hand)."""
    if deployment is None or deployment.metadata is None or deployment.spec is None:
        return None
    annotations = deployment.metadata.annotations or {}
    if SUSPENDED_REPLICAS_ANNOTATION not in annotations or deployment.spec.replicas:
        return None
    try:
        return datetime.fromisoformat(annotations.get(SUSPENDED_AT_ANNOTATION, ""))
    except ValueError:
        # Suspended, but the time is unreadable: the epoch makes the retention period run out.
        return datetime.fromtimestamp(0, tz=UTC)


def _pod_started_at(pod: k8s.V1Pod) -> datetime | None:
    for container in _container_statuses(pod):
        state = container.state
        if state and state.running and state.running.started_at:
            return state.running.started_at
        if state and state.terminated and state.terminated.started_at:
            return state.terminated.started_at
    return pod.status.start_time if pod.status else None


def _pod_finished_at(pod: k8s.V1Pod) -> datetime | None:
    finished = [
        c.state.terminated.finished_at
        for c in _container_statuses(pod)
        if c.state and c.state.terminated and c.state.terminated.finished_at
    ]
    return max(finished) if finished else None


def _newest_first(pods: Sequence[k8s.V1Pod]) -> list[k8s.V1Pod]:
    def created(pod: k8s.V1Pod) -> str:
        stamp = pod.metadata.creation_timestamp if pod.metadata else None
        return stamp.isoformat() if stamp else ""

    return sorted(pods, key=created, reverse=True)


def workload_status(
    *,
    namespace: str,
    request_id: str,
    attempt: int,
    job: k8s.V1Job | None = None,
    deployment: k8s.V1Deployment | None = None,
    pods: Sequence[k8s.V1Pod] = (),
) -> WorkloadStatus:
    """Map a workload's Job or Deployment and its pods onto one `WorkloadStatus`.

    Pods being deleted are ignored while live ones exist, and the newest pod speaks for the
    workload. Precedence, first match wins:
    1. nothing exists → missing;
    2. a Job condition Complete/SuccessCriteriaMet → succeeded, Failed/FailureTarget → failed
       with the Job's reason (DeadlineExceeded, BackoffLimitExceeded) and the pod's detail;
    3. a container stuck in InvalidImageName, CrashLoopBackOff, CreateContainerConfigError, ...
       → failed, with a clear reason (a crash loop with the container's last exit);
    4. a Job pod that failed → failed with its exit code or eviction reason;
    5. a container that cannot pull its image (ErrImagePull, ImagePullBackOff) → pending with
       that reason, the image and the kubelet's message (the portal gives it a grace period);
    6. a pod Running, or the Deployment Available with a replica available → running;
    7. a Job pod that succeeded before the Job recorded it → running (Completing);
    8. a pod the scheduler could not place → pending with the scheduler's message;
    9. a Deployment whose ReplicaSet cannot create pods (quota) → pending with that message;
    10. otherwise pending, with the container's waiting reason when there is one.
    `started_at` is only set once the workload has run.
    """
    owner = job if job is not None else deployment
    suspended = suspended_since(deployment)
    anchor: Any = owner if owner is not None else (pods[0] if pods else None)
    labels: Mapping[str, str] = {}
    if anchor is not None and anchor.metadata is not None:
        labels = anchor.metadata.labels or {}
    kind_label = labels.get(KIND_LABEL)
    kind: WorkloadKind | None = None
    if kind_label in WORKLOAD_KINDS:
        kind = kind_label  # type: ignore[assignment]
    elif job is not None:
        kind = "job"
    live = [p for p in pods if not (p.metadata and p.metadata.deletion_timestamp)]
    pods = _newest_first(live or pods)
    pod = pods[0] if pods else None

    def status(
        phase: WorkloadPhase,
        reason: str = "",
        message: str = "",
        *,
        source: k8s.V1Pod | None = pod,
        finished_at: datetime | None = None,
    ) -> WorkloadStatus:
        has_run = phase in ("running", "succeeded", "failed")
        exit_code, exit_reason = pod_exit(source)
        return WorkloadStatus(
            request_id=request_id,
            attempt=attempt,
            phase=phase,
            namespace=namespace,
            # A resumed attempt runs in the Deployment of the attempt it took over.
            name=str(owner.metadata.name)
            if owner is not None and owner.metadata is not None and owner.metadata.name
            else workload_name(request_id, attempt),
            kind=kind,
            reason=reason,
            message=message,
            node_name=source.spec.node_name if source is not None and source.spec else None,
            started_at=_pod_started_at(source) if source is not None and has_run else None,
            finished_at=finished_at,
            team_slug=labels.get(TEAM_LABEL, ""),
            project_slug=labels.get(PROJECT_LABEL, ""),
            suspended_at=suspended if phase == "suspended" else None,
            pod_names=tuple(str(p.metadata.name) for p in pods if p.metadata is not None),
            exit_code=exit_code,
            exit_reason=exit_reason,
        )

    if owner is None and pod is None:
        return status("missing", "NotFound", "no Job, Deployment or pod exists for this attempt")
    if suspended is not None:
        return status("suspended", "ScaledToZero", "scaled to zero by reclamation", source=None)
    if job is not None:
        done = _true_condition(job, _COMPLETE_CONDITIONS)
        if done is not None:
            finished = (job.status.completion_time if job.status else None) or (
                done.last_transition_time
            )
            return status("succeeded", "Completed", finished_at=finished)
        failed = _true_condition(job, _FAILED_CONDITIONS)
        if failed is not None:
            detail = pod_termination(pod) if pod is not None else None
            message = str(failed.message or "the Job failed")
            if detail is not None and failed.reason != "DeadlineExceeded":
                message = f"{message}; {detail[1]}"
            finished = (_pod_finished_at(pod) if pod is not None else None) or (
                failed.last_transition_time
            )
            return status("failed", str(failed.reason or "Failed"), message, finished_at=finished)
    for candidate in pods:
        problem = pod_problem(candidate)
        if problem is not None:
            return status("failed", *problem)
    if job is not None and pod is not None and pod.status and pod.status.phase == "Failed":
        reason, message = pod_termination(pod) or ("Failed", "the pod failed")
        return status("failed", reason, message, finished_at=_pod_finished_at(pod))
    for candidate in pods:
        pull_error = pod_pull_error(candidate)
        if pull_error is not None:
            return status("pending", *pull_error, source=candidate)
    running = next((p for p in pods if p.status and p.status.phase == "Running"), None)
    if running is not None:
        return status("running", source=running)
    if deployment is not None and _available_replicas(deployment) > 0:
        return status("running")
    if pod is not None and pod.status and pod.status.phase == "Succeeded" and job is not None:
        # The pod is done but the Job controller has not recorded it yet.
        return status("running", "Completing", "the pod succeeded; the Job is being finalised")
    for candidate in pods:
        unschedulable = pod_unschedulable(candidate)
        if unschedulable is not None:
            return status("pending", "Unschedulable", unschedulable)
    if deployment is not None:
        failure = _true_condition(deployment, ("ReplicaFailure",))
        if failure is not None:
            return status("pending", str(failure.reason or "FailedCreate"), str(failure.message))
    if pod is None:
        return status("pending", "NoPod", "waiting for the controller to create the pod")
    waiting = next(
        (c.state.waiting for c in _container_statuses(pod) if c.state and c.state.waiting), None
    )
    if waiting is not None:
        return status("pending", str(waiting.reason or "Waiting"), str(waiting.message or ""))
    return status("pending", "Pending", "the pod is waiting to start")


def job_deadline_seconds(
    job: k8s.V1Job, *, max_runtime_seconds: int, running_since: datetime | None
) -> int:
    """The `activeDeadlineSeconds` that lets `job` run `max_runtime_seconds` once its pod runs.

    The Job controller counts the deadline from the Job's `startTime` (set when the Job is
    created, or resumed from suspension), so the time the pod waited for a node is added:
    1. running since a known moment and the Job started → ceil(running_since − startTime), at
       least 0, + the max runtime;
    2. not running yet (or no start time) → the max runtime + the allowance the Job has now
       over its recorded max runtime (what the launch gave it to wait for a node).
    """
    status = job.status
    started = status.start_time if status is not None else None
    if running_since is not None and started is not None:
        waited = max(0.0, (running_since - started).total_seconds())
        return max_runtime_seconds + math.ceil(waited)
    current = job.spec.active_deadline_seconds if job.spec is not None else None
    annotations = (job.metadata.annotations if job.metadata is not None else None) or {}
    recorded = annotations.get(MAX_RUNTIME_ANNOTATION, "")
    allowance = 0
    if current is not None and recorded.isdigit():
        allowance = max(0, int(current) - int(recorded))
    return max_runtime_seconds + allowance


def with_failed_create(status: WorkloadStatus, events: Sequence[k8s.CoreV1Event]) -> WorkloadStatus:
    """A Job without a pod says why its controller could not create one: the newest
    `FailedCreate` event (a ResourceQuota's "exceeded quota: ..."). The Job records no condition
    for it, so `workload_status` alone can only say `NoPod`."""
    if status.phase != "pending" or status.reason != "NoPod" or not events:
        return status

    def when(event: k8s.CoreV1Event) -> str:
        stamp = event.last_timestamp or event.event_time or event.first_timestamp
        return stamp.isoformat() if stamp else ""

    newest = max(events, key=when)
    return replace(status, reason="FailedCreate", message=str(newest.message or "").strip())


# Gangs and HAMi's assignment -----------------------------------------------------------------


def _label(obj: Any, key: str) -> str | None:
    metadata = getattr(obj, "metadata", None)
    return ((metadata.labels if metadata is not None else None) or {}).get(key)


def _rank(obj: Any) -> int | None:
    """A gang object's rank: a rank Job's or pod's label, or the completion index the Job
    controller puts on each pod of an indexed Job (label and annotation). None for the
    indexed Job itself, which holds every rank."""
    metadata = getattr(obj, "metadata", None)
    annotations = (metadata.annotations if metadata is not None else None) or {}
    value = (
        _label(obj, RANK_LABEL)
        or _label(obj, COMPLETION_INDEX_ANNOTATION)
        or (annotations.get(COMPLETION_INDEX_ANNOTATION) if _label(obj, GANG_SIZE_LABEL) else None)
    )
    return int(value) if value is not None and value.isdigit() else None


def is_gang(objects: Sequence[Any]) -> bool:
    """True when any of a workload's Jobs or pods belongs to a gang."""
    return any(_label(obj, GANG_SIZE_LABEL) or _rank(obj) is not None for obj in objects)


def gang_status(
    *,
    namespace: str,
    request_id: str,
    attempt: int,
    jobs: Sequence[k8s.V1Job],
    pods: Sequence[k8s.V1Pod] = (),
) -> WorkloadStatus:
    """One status for a gang, from each rank's `workload_status` (its pods, with the gang's
    indexed Job, or with the rank's own Job). The gang is one workload:
    1. no rank exists → missing;
    2. any rank failed → failed, with the reason of the rank that failed first (the one whose
       pod ended first; the portal tears the gang down);
    3. every rank succeeded → succeeded (finished when the last one did);
    4. a rank of the gang size without a Job or pod → pending `GangIncomplete`;
    5. every rank running (or done) → running, from when the last rank started;
    6. otherwise pending with the reason of the first waiting rank that has no node yet, else
       of the first waiting rank.
    """
    size = max(
        [int(v) for v in (_label(o, GANG_SIZE_LABEL) for o in (*jobs, *pods)) if v and v.isdigit()]
        + [(_rank(o) or 0) + 1 for o in (*jobs, *pods)]
        + [1]
    )
    shared = next((j for j in jobs if _rank(j) is None), None)  # the gang's indexed Job
    ranks = [
        workload_status(
            namespace=namespace,
            request_id=request_id,
            attempt=attempt,
            job=next((j for j in jobs if _rank(j) == rank), shared),
            pods=[p for p in pods if _rank(p) == rank],
        )
        for rank in range(size)
    ]
    node_names = tuple(r.node_name or "" for r in ranks)
    lead = next((r for r in ranks if r.phase != "missing"), ranks[0])
    gang = replace(
        lead,
        name=workload_name(request_id, attempt),
        gang_size=size,
        node_names=node_names,
        node_name=ranks[0].node_name,
        pod_names=tuple(name for r in ranks for name in r.pod_names),
    )

    def at(rank: int, status: WorkloadStatus) -> str:
        where = f" on {status.node_name}" if status.node_name else ""
        return f"rank {rank}{where}: {status.message}".rstrip(": ")

    if all(r.phase == "missing" for r in ranks):
        return gang
    failed = [(rank, status) for rank, status in enumerate(ranks) if status.phase == "failed"]
    if failed:
        # A failed indexed Job fails every rank; the culprit is the rank whose pod ended first.
        rank, status = min(
            failed,
            key=lambda item: (
                item[1].exit_code is None,
                item[1].finished_at or datetime.max.replace(tzinfo=UTC),
                item[0],
            ),
        )
        return replace(
            gang,
            phase="failed",
            reason=status.reason,
            message=at(rank, status),
            finished_at=status.finished_at,
            exit_code=status.exit_code,
            exit_reason=status.exit_reason,
        )
    if all(r.phase == "succeeded" for r in ranks):
        finished = [r.finished_at for r in ranks if r.finished_at is not None]
        return replace(
            gang,
            phase="succeeded",
            reason="Completed",
            finished_at=max(finished) if finished else None,
        )
    missing = [rank for rank, status in enumerate(ranks) if status.phase == "missing"]
    if missing:
        return replace(
            gang,
            phase="pending",
            reason="GangIncomplete",
            message=f"rank {missing[0]} of {size} has no Job or pod",
            started_at=None,
            finished_at=None,
        )
    if all(r.phase in ("running", "succeeded") for r in ranks):
        started = [r.started_at for r in ranks if r.started_at is not None]
        return replace(
            gang,
            phase="running",
            reason="",
            message="",
            started_at=max(started) if started else None,
        )
    waiting_ranks = [(i, r) for i, r in enumerate(ranks) if r.phase == "pending"]
    # A rank no node took says more than one that is starting on its node.
    rank, waiting = next(((i, r) for i, r in waiting_ranks if not r.node_name), waiting_ranks[0])
    return replace(
        gang,
        phase="pending",
        reason=waiting.reason,
        message=at(rank, waiting),
        started_at=None,
        finished_at=None,
    )


def hami_assigned_uuids(pod: k8s.V1Pod) -> tuple[str, ...]:
    """The cards HAMi's scheduler assigned to a pod, from `hami.io/vgpu-devices-allocated`
    (`UUID,type,memory,cores:` per card, `;` after each container); () before it decided."""
    annotations = (pod.metadata.annotations if pod.metadata else None) or {}
    raw = annotations.get(pod_manifests.HAMI_ALLOCATED_ANNOTATION, "")
    uuids: list[str] = []
    for container in raw.split(";"):
        for device in container.split(":"):
            uuid = device.split(",")[0].strip()
            if uuid and uuid not in uuids:
                uuids.append(uuid)
    return tuple(uuids)


def with_hami_assignment(status: WorkloadStatus, pods: Sequence[k8s.V1Pod]) -> WorkloadStatus:
    """`status` with the cards HAMi assigned to the workload's newest live pod, if it did."""
    live = [p for p in pods if not (p.metadata and p.metadata.deletion_timestamp)]
    for pod in _newest_first(live):
        uuids = hami_assigned_uuids(pod)
        if uuids:
            node = pod.spec.node_name if pod.spec is not None else None
            annotations = (pod.metadata.annotations if pod.metadata else None) or {}
            node = node or annotations.get(pod_manifests.HAMI_NODE_ANNOTATION) or status.node_name
            return replace(status, gpu_uuids=uuids, node_name=node)
    return status
