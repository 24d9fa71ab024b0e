"""On a Kueue-mode cluster: Kueue's word on the portal's Jobs, written onto their requests.

The cycle hands the queued requests of Kueue-mode clusters to Kueue
(`scheduling.services.cycle._hand_to_kueue`) and the launch creates each Job suspended in the
project's LocalQueue on its cluster. From then on Kueue decides, and this module reads its Workloads
back, once per sync of that cluster (`execution.sync_workloads(cluster=...)`):
1. read every Workload and LocalQueue (`KueueWorkloadReader`), mapped by the pure
   `kueue_workloads.kueue_views`;
2. a request whose Workload is pending shows Kueue's reason in `waiting_reason` and its computed
   place in the ClusterQueue in `queue_position`;
3. a request whose Workload Kueue evicted (preempted) is preempted and requeued as the portal's
   own engine does it: the allocation ends, the attempt's Job is deleted, the next cycle hands
   a new attempt to Kueue (up to the tier's attempts);
4. admitted and finished Workloads are left to the Job sync, which reads the pods as always;
   a request Kueue held gets its allocation's `admitted_at` moved to Kueue's admission, so the
   reclaim's pending timeout (`runtime/services/reclaim.py`) counts from there, not from the
   hand-over.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from django.db import transaction

from runtime.cluster.base import workload_name
from runtime.cluster.kueue_workloads import KueueView
from runtime.selectors.workloads import KUEUE_WAIT_CODE
from scheduling import dispatch
from scheduling.choices import RequestStatus
from scheduling.models import Allocation, GpuRequest, ReclaimPolicy
from scheduling.services.blockers import cluster_blocker
from scheduling.services.lifecycle import end_allocation, transition
from scheduling.services.notifications import notify

log = logging.getLogger(__name__)

HELD_REASON = "Queued in Kueue: it starts when Kueue admits it."
KUEUE_HEADLINE = "Kueue holds it until the team's ClusterQueue has quota for it."


def read_views(backend: Any) -> dict[tuple[str, str], KueueView]:
    """Kueue's view of every Job, through the backend's API client (Kubernetes only)."""
    api_client = getattr(backend, "api_client", None)
    if api_client is None:
        return {}
    from runtime.cluster.kubernetes_kueue import KueueWorkloadReader

    return KueueWorkloadReader(api_client).views()


def sync_kueue(*, requests: Sequence[GpuRequest], backend: Any) -> set[int]:
    """Steps 1-4 for live (launching, running) requests; returns the ids Kueue holds or just
    evicted, which the Job sync must leave alone (their suspended Jobs have no pods to read)."""
    if not requests:
        return set()
    return apply_kueue_views(requests, read_views(backend))


def apply_kueue_views(
    requests: Sequence[GpuRequest], views: Mapping[tuple[str, str], KueueView]
) -> set[int]:
    held: set[int] = set()
    for request in requests:
        view = views.get(
            (request.project.namespace, workload_name(str(request.pk), request.attempt))
        )
        if view is None:
            continue  # Kueue has not made its Workload yet: the Job sync says "pending"
        if view.state == "pending":
            record_kueue_wait(request, view)
            held.add(request.pk)
        elif view.state == "evicted":
            requeue_evicted(request, view)
            held.add(request.pk)
        elif request.waiting_code == KUEUE_WAIT_CODE:
            record_kueue_admission(request, view)
    return held


def record_kueue_wait(request: GpuRequest, view: KueueView) -> bool:
    """Step 2: one compare-and-set UPDATE, only when Kueue's reason or the position changed."""
    fields: dict[str, Any] = {
        "waiting_reason": view.message,
        "waiting_code": KUEUE_WAIT_CODE,
        "queue_position": view.position,
        "blocker": cluster_blocker(headline=KUEUE_HEADLINE, reason=view.message),
    }
    if request.status == RequestStatus.LAUNCHING:
        fields["status_reason"] = HELD_REASON
    if all(getattr(request, name) == value for name, value in fields.items()):
        return False
    changed = GpuRequest.objects.filter(pk=request.pk, status=request.status).update(**fields)
    for name, value in fields.items():
        setattr(request, name, value)
    return bool(changed)


def record_kueue_admission(request: GpuRequest, view: KueueView) -> None:
    """Step 4: Kueue let a request it held go; the cluster's pending clock starts now."""
    GpuRequest.objects.filter(pk=request.pk, waiting_code=KUEUE_WAIT_CODE).update(
        waiting_code="", queue_position=None, blocker={}
    )
    request.waiting_code, request.queue_position, request.blocker = "", None, {}
    if view.admitted_at is not None:
        Allocation.objects.filter(
            request=request,
            attempt=request.attempt,
            ended_at__isnull=True,
            admitted_at__lt=view.admitted_at,
        ).update(admitted_at=view.admitted_at)


def requeue_evicted(request: GpuRequest, view: KueueView) -> str:
    """Step 3: Kueue took the quota back; the request returns to the queue with its age."""
    request = GpuRequest.objects.select_related("flavor__pool", "owner").get(pk=request.pk)
    policy = ReclaimPolicy.objects.filter(tier_id=request.flavor.pool.tier_id).first()
    max_attempts = (policy or ReclaimPolicy()).max_attempts
    reason = view.message or f"Evicted by Kueue ({view.reason})."
    with transaction.atomic():
        if request.status not in (RequestStatus.LAUNCHING, RequestStatus.RUNNING):
            return request.status
        if not transition(request, RequestStatus.PREEMPTED, actor=None, reason=reason):
            return request.status
        allocation = end_allocation(request, reason="preempted")
        attempt = allocation.attempt if allocation is not None else request.attempt
        dispatch.request_termination(request.pk, attempt, "preempted by Kueue")
        dispatch.request_scheduling_cycle()
        if request.attempt < max_attempts:
            transition(
                request, RequestStatus.QUEUED, actor=None, reason="Requeued after preemption."
            )
            return RequestStatus.QUEUED
        final = f"Preempted on attempt {request.attempt} of {max_attempts}; not requeued again."
        transition(request, RequestStatus.FAILED, actor=None, reason=final)
        notify(
            users=[request.owner],
            subject=f"GPU request {request.pk} was preempted and not requeued",
            body=final + " Submit it again to run it.",
            event={"type": "request.preempted_final", "request": request.pk},
        )
        return RequestStatus.FAILED
