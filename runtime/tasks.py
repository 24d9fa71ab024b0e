"""Thin Celery tasks of what runs on the cluster: take ids, call one service, safe to run twice.

Tasks ack late and are re-queued when a worker dies, so every one of them must tolerate running
again after a partial first run. Only named transient errors are retried, with jittered backoff.
"""

from __future__ import annotations

import logging

from celery import Task, shared_task
from django.utils import timezone

from runtime.cluster.base import ClusterError, PermanentClusterError, TransientClusterError
from runtime.selectors import workloads
from runtime.services import (
    clusters,
    execution,
    inspection,
    inventory,
    kueue_policy,
    monitoring,
    preemption,
    project_data,
    propagation,
    reclaim,
    workload_follower,
)
from scheduling.dispatch import (
    clear_launch_queued,
    queued_launches,
    request_launch,
    request_scheduling_cycle,
)
from scheduling.models import Cluster, GpuRequest
from scheduling.services.kueue_drift import record_check

log = logging.getLogger(__name__)


class ClusterTask(Task):
    """A task that talks to the cluster: transient cluster errors retry with jittered backoff."""

    autoretry_for = (TransientClusterError,)
    retry_backoff = 2
    retry_backoff_max = 120
    retry_jitter = True
    max_retries = 12
    acks_late = True
    soft_time_limit = 100
    time_limit = 120


# An API server refuses everything with 401/403 while its authorizer catches up: for a few
# seconds after it starts, and after the portal writes a project's RoleBinding. A refusal for
# authorization is retried this many times (2 + 4 + 8 + 16 s) before the launch fails with it.
AUTHORIZATION_RETRIES = 4


@shared_task(base=ClusterTask, bind=True)
def launch_workload(self: Task, request_id: int, attempt: int, refusals: int = 0) -> str:
    clear_launch_queued(request_id, attempt)  # out of the queue: the sweeper watches it again
    try:
        return execution.launch_request(request_id=request_id, attempt=attempt)
    except PermanentClusterError as error:
        # Refusals are counted apart from the task's retries: a launch that waited out an
        # unreachable API server has used several of those by the time the server refuses.
        # (Should the outage have used them all, the refusal ends this task and the stuck-request
        # sweeper launches the request again with a fresh count.)
        if error.status in (401, 403) and refusals < AUTHORIZATION_RETRIES:
            raise self.retry(
                exc=error, countdown=2 ** (refusals + 1), kwargs={"refusals": refusals + 1}
            ) from error
        execution.fail_launch(
            request_id=request_id, attempt=attempt, reason=f"The cluster refused it: {error}"
        )
        request_scheduling_cycle()
        return "failed"


@shared_task(base=ClusterTask)
def terminate_workload(request_id: int, attempt: int, reason: str) -> None:
    execution.terminate_request_workload(request_id=request_id, attempt=attempt, reason=reason)


@shared_task(base=ClusterTask)
def preempt_workload(request_id: int, attempt: int) -> int:
    """A preempted attempt: its pods get the notice, then SIGTERM with the tier's grace."""
    return preemption.preempt_request_workload(request_id=request_id, attempt=attempt)


@shared_task(base=ClusterTask)
def scale_workload_to_zero(request_id: int, attempt: int, reason: str) -> bool:
    """A reclaimed notebook or service keeps its objects at zero replicas, to be resumed."""
    return reclaim.scale_request_workload_to_zero(
        request_id=request_id, attempt=attempt, reason=reason
    )


@shared_task(base=ClusterTask)
def set_workload_deadline(request_id: int, attempt: int) -> bool:
    """A lead's extension, or the start of the Job's pod, reaches the Job: its deadline becomes
    the max runtime from when the pod runs."""
    return propagation.set_request_deadline(
        request_id=request_id,
        attempt=attempt,
        backend=execution.attempt_backend(request_id, attempt),
    )


@shared_task(base=ClusterTask)
def push_project_quotas(team_id: int, project_id: int | None) -> int:
    """A project or a quota was created or changed: make ready the namespace, ResourceQuota
    and limit range of every project it covers, on every cluster, before a launch needs them."""
    project_ids = propagation.affected_projects(team_id=team_id, project_id=project_id)
    pushed = clusters.on_each_cluster(
        lambda cluster, backend: execution.prepare_projects(
            project_ids=project_ids, backend=backend, cluster=cluster
        )
    )
    return sum(pushed.values())


@shared_task(base=ClusterTask)
def sync_project_data(project_id: int) -> int:
    """A workspace or secret changed: converge the project's claims and Secrets, on every
    cluster."""
    synced = clusters.on_each_cluster(
        lambda cluster, backend: project_data.sync_project_data(
            project_id=project_id, backend=backend
        )
    )
    return sum(synced.values())


@shared_task(base=ClusterTask)
def remove_project_data(namespace: str, kind: str, names: list[str]) -> None:
    """A workspace or secret was deleted: delete its claims or Secret on the cluster."""
    clusters.on_each_cluster(
        lambda cluster, backend: backend.remove_project_data(namespace, kind, names)
    )


@shared_task(base=ClusterTask)
def sync_workloads() -> dict[str, int]:
    """The periodic workload sync, of every cluster no workload follower is following."""
    by_cluster = clusters.on_each_cluster(
        lambda cluster, backend: execution.sync_watched_workloads(backend=backend, cluster=cluster),
        only=lambda cluster: not workload_follower.is_followed(cluster),
    )
    moved: dict[str, int] = {}
    for counts in by_cluster.values():
        for status, count in counts.items():
            moved[status] = moved.get(status, 0) + count
    if moved:
        request_scheduling_cycle()  # finished work frees capacity
    return moved


@shared_task(base=ClusterTask)
def sync_inventory() -> dict[str, int]:
    """Read nodes and GPUs from each real cluster (a simulated fleet is the database itself)."""
    by_cluster = clusters.on_each_cluster(
        lambda cluster, backend: inventory.apply_inventory(
            backend.sync_inventory(), cluster=cluster
        ),
        only=lambda cluster: not cluster.is_simulated,
    )
    counts = {"added": 0, "updated": 0, "lost": 0, "held_back": 0}
    for answer in by_cluster.values():
        for key, value in answer.items():
            counts[key] = counts.get(key, 0) + value
    if counts["added"] or counts["lost"]:
        request_scheduling_cycle()  # node changes can unblock (or strand) work
    return counts


@shared_task(base=ClusterTask)
def reconcile_kueue_policy() -> int:
    """Put each Kueue-mode cluster's Kueue objects back in line with the portal's policy (after
    a quota or project change, or an edit made outside the portal), and record what differed
    for the fleet page and /metrics, cluster by cluster. Returns how many objects differed in
    all; with no Kueue-mode cluster it does nothing."""
    differed = clusters.on_each_cluster(
        lambda cluster, backend: _reconcile_kueue_policy_on(cluster),
        only=lambda cluster: cluster.scheduler_mode == "kueue",
    )
    return sum(differed.values())


def _reconcile_kueue_policy_on(cluster: Cluster) -> int:
    try:
        differences = kueue_policy.reconcile(apply=True, cluster=cluster)
    except ClusterError as exc:
        record_check([], applied=False, error=str(exc), cluster=cluster.slug)
        raise
    record_check([str(change) for change in differences], applied=True, cluster=cluster.slug)
    return len(differences)


@shared_task(acks_late=True, soft_time_limit=50, time_limit=60)
def record_utilisation() -> int:
    return monitoring.record_samples()


@shared_task(base=ClusterTask)
def enforce_reclaim_policies() -> dict[str, int]:
    return reclaim.enforce_reclaim_policies()


@shared_task(acks_late=True)
def sweep_stuck_requests() -> int:
    """Launch again anything stranded in admitted/launching by a lost message or killed worker;
    a launch still waiting in the queue (see `dispatch`) is not stranded, however long the
    request has been admitted."""
    candidates = workloads.stuck_requests()
    waiting = queued_launches(candidates)
    stuck = [key for key in candidates if key not in waiting]
    for request_id, attempt in stuck:
        GpuRequest.objects.filter(pk=request_id).update(updated_at=timezone.now())
        request_launch(request_id, attempt)
    return len(stuck)


# Reads for the web tier, which holds no cluster credentials (runtime/services/inspection.py):
# not retried, not re-delivered (the web stops waiting after a few seconds), answered through the
# cache.


@shared_task(acks_late=False, ignore_result=True)
def read_workload_logs(
    reply_key: str, *, request_id: int, attempt: int, tail: int, since: str | None = None
) -> None:
    inspection.answer(
        reply_key,
        lambda: inspection.collect_logs(
            request_id=request_id, attempt=attempt, tail=tail, since=since
        ),
    )


@shared_task(acks_late=False, ignore_result=True)
def list_workload_events(reply_key: str, *, request_id: int, attempt: int) -> None:
    inspection.answer(
        reply_key, lambda: inspection.collect_events(request_id=request_id, attempt=attempt)
    )
