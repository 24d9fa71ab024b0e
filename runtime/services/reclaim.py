"""Runtime governance: reclaim idle, timed-out, stuck and lost work, and clean up zombies.

Each pass reads, decides with the pure rules in `reclaim_rules`, and acts per request in its
own transaction; every reclamation records its reason and evidence, ends the allocation at
once (the next cycle can use the GPUs) and has the workload deleted after commit.
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from runtime.cluster.base import ClusterBackend, WorkloadStatus
from runtime.selectors.workloads import KUEUE_WAIT_CODE
from runtime.services.clusters import on_each_cluster
from runtime.services.execution import attempt_backend
from runtime.services.inventory import stamp_unschedulable_nodes
from runtime.services.outcomes import reclaim_request, reclaim_timed_out, requeue_or_fail
from scheduling.choices import FINISHED_STATUSES, RESUMABLE_KINDS, RequestStatus, WorkloadKind
from scheduling.models import (
    Allocation,
    GpuRequest,
    Node,
    ReclaimPolicy,
    Tier,
)
from scheduling.reclaim_rules import idle_verdict, stuck_pending, timeout_stage
from scheduling.selectors.activity import idle_observation
from scheduling.services.lifecycle import record_request_event
from scheduling.services.notifications import notify
from tenants.services.organisation import record_audit_event

log = logging.getLogger(__name__)


def policy_for(tier: Tier, cache: dict[int, ReclaimPolicy]) -> ReclaimPolicy:
    if tier.pk not in cache:
        cache[tier.pk] = ReclaimPolicy.objects.filter(tier=tier).first() or ReclaimPolicy(tier=tier)
    return cache[tier.pk]


def _epoch(moment: datetime | None) -> float | None:
    return moment.timestamp() if moment else None


def scale_request_workload_to_zero(
    *, request_id: int, attempt: int, reason: str, backend: ClusterBackend | None = None
) -> bool:
    """Scale a reclaimed attempt's workload to zero; True if it was kept (notebook, service)."""
    backend = backend or attempt_backend(request_id, attempt)
    request = GpuRequest.objects.select_related("project__team").get(pk=request_id)
    return backend.scale_to_zero(request.project.namespace, str(request.pk), attempt, reason=reason)


def _idle_pass(now: datetime, policies: dict[int, ReclaimPolicy], outcome: Counter[str]) -> None:
    running = (
        Allocation.objects.active()
        .filter(request__status=RequestStatus.RUNNING, started_at__isnull=False)
        .select_related("request", "request__owner", "request__team", "request__project")
        .select_related("pool__tier", "pool__cluster")
    )
    for allocation in running:
        request = allocation.request
        policy = policy_for(allocation.pool.tier, policies)
        window = (
            policy.notebook_idle_window_seconds
            if request.kind == WorkloadKind.NOTEBOOK
            else policy.idle_window_seconds
        )
        observation = idle_observation(
            allocation=allocation, cluster=allocation.pool.cluster, window_seconds=window, now=now
        )
        if observation is None:  # no fresh GPU activity: never reclaim on missing data
            outcome["idle_paused"] += 1
            continue
        verdict = idle_verdict(
            observation.samples,
            now=now.timestamp(),
            started_at=observation.observed_from,
            threshold_percent=policy.idle_threshold_percent,
            window_seconds=window,
            warning_seconds=policy.idle_warning_seconds,
            warned_at=_epoch(request.idle_warned_at),
            exempt_until=_epoch(request.idle_exempt_until),
        )
        evidence = verdict.evidence(threshold=policy.idle_threshold_percent, window_seconds=window)
        if verdict.stage == "warn" and request.idle_warned_at is None:
            _warn_idle(request, allocation, policy, evidence, verdict.reclaim_at)
            outcome["idle_warned"] += 1
        elif verdict.stage == "reclaim" and policy.reclaim_idle:
            minutes = round(verdict.idle_seconds / 60)
            reason = (
                f"Reclaimed: GPU activity stayed under {policy.idle_threshold_percent}% "
                f"for {minutes} minutes (peak {verdict.peak_activity_percent:.1f}%)."
            )
            if reclaim_request(request, reason=reason, code="idle", evidence=evidence):
                outcome["idle_reclaimed"] += 1
        elif verdict.stage == "active" and request.idle_warned_at is not None:
            GpuRequest.objects.filter(pk=request.pk).update(idle_warned_at=None)


def _warn_idle(
    request: GpuRequest,
    allocation: Allocation,
    policy: ReclaimPolicy,
    evidence: dict[str, Any],
    reclaim_at: float | None,
) -> None:
    when = datetime.fromtimestamp(reclaim_at, tz=UTC) if reclaim_at else None
    with transaction.atomic():
        GpuRequest.objects.filter(pk=request.pk).update(idle_warned_at=timezone.now())
        if policy.idle_marks_preemptible:
            Allocation.objects.filter(pk=allocation.pk).update(is_preemptible=True)
        record_request_event(
            request,
            actor=None,
            action="reclaim.idle_warning",
            message=f"Idle; reclaimed at {when:%H:%M} UTC unless it gets busy." if when else "",
            data=evidence,
        )
        notify(
            users=[request.owner],
            subject=f"GPU request {request.pk} is idle and will be reclaimed",
            body=(
                f"Its GPU activity has stayed under {policy.idle_threshold_percent}%. "
                f"It will be reclaimed at {when:%Y-%m-%d %H:%M} UTC unless it gets busy "
                "or your team lead grants an exemption."
                if when
                else "Its GPUs are idle."
            ),
            event={"type": "reclaim.idle_warning", "request": request.pk, "evidence": evidence},
        )


def _timeout_pass(now: datetime, policies: dict[int, ReclaimPolicy], outcome: Counter[str]) -> None:
    running = GpuRequest.objects.filter(
        status=RequestStatus.RUNNING, started_at__isnull=False
    ).select_related("flavor__pool__tier", "owner", "team", "project")
    for request in running:
        policy = policy_for(request.flavor.pool.tier, policies)
        assert request.started_at is not None
        stage = timeout_stage(
            started_at=request.started_at.timestamp(),
            max_runtime_seconds=request.max_runtime_seconds,
            warning_seconds=policy.timeout_warning_seconds,
            now=now.timestamp(),
        )
        if stage == "warn" and request.timeout_warned_at is None:
            GpuRequest.objects.filter(pk=request.pk).update(timeout_warned_at=now)
            record_request_event(
                request,
                actor=None,
                action="reclaim.timeout_warning",
                message="The max runtime ends soon; ask your lead for an extension if needed.",
            )
            notify(
                users=[request.owner],
                subject=f"GPU request {request.pk} reaches its max runtime soon",
                body="Ask your team lead for an extension if the work needs longer.",
                event={"type": "reclaim.timeout_warning", "request": request.pk},
            )
            outcome["timeout_warned"] += 1
        elif stage == "stop" and reclaim_timed_out(request):
            outcome["timeout_stopped"] += 1


def _abnormal_pass(
    now: datetime, policies: dict[int, ReclaimPolicy], outcome: Counter[str]
) -> None:
    # A node gone NotReady only because the control plane was down comes back within a minute
    # or two; work is requeued only once its node stayed away for the grace period.
    stamp_unschedulable_nodes(now=now)
    lost_since = now - timedelta(seconds=settings.NODE_LOST_GRACE_SECONDS)
    lost_nodes = set(
        Node.objects.filter(is_schedulable=False, unschedulable_since__lte=lost_since).values_list(
            "name", flat=True
        )
    )
    known_nodes = set(Node.objects.values_list("name", flat=True))
    live = (
        Allocation.objects.active()
        .filter(request__status__in=(RequestStatus.LAUNCHING, RequestStatus.RUNNING))
        .select_related("request", "request__team", "request__project", "request__owner")
        .select_related("pool__tier")
    )
    for allocation in live:
        request = allocation.request
        policy = policy_for(allocation.pool.tier, policies)
        # Where it runs: its claims (moved to the node the cluster chose, see
        # execution.reconcile_placement), else the node recorded for it.
        nodes = {claim["node"] for claim in allocation.claims} or {
            name for name in allocation.node_name.split(",") if name
        }
        gone = sorted(n for n in nodes if n in lost_nodes or n not in known_nodes)
        if gone:
            reason = f"Node {', '.join(gone)} was lost or cordoned"
            result = requeue_or_fail(
                request, reason=reason, code="node_lost", max_attempts=policy.max_attempts
            )
            outcome[f"node_lost_{result}"] += 1
        elif (
            request.status == RequestStatus.LAUNCHING
            # Waiting in Kueue's queue is not stuck: its clock starts when Kueue admits it.
            and request.waiting_code != KUEUE_WAIT_CODE
            and stuck_pending(
                launched_at=allocation.admitted_at.timestamp(),
                pending_timeout_seconds=policy.pending_timeout_seconds,
                now=now.timestamp(),
            )
        ):
            minutes = policy.pending_timeout_seconds // 60
            reason = f"The cluster did not start it within {minutes} minutes"
            result = requeue_or_fail(
                request, reason=reason, code="stuck_pending", max_attempts=policy.max_attempts
            )
            outcome[f"stuck_pending_{result}"] += 1


ZOMBIE_GRACE = timedelta(minutes=5)
# A scaled-to-zero workload waits for its resume while the request is reclaimed, or resumed and
# on its way back (queued, admitted, launching: the launch takes the workload over).
RESUMABLE_STATUSES = (
    RequestStatus.RECLAIMED,
    RequestStatus.QUEUED,
    RequestStatus.ADMITTED,
    RequestStatus.LAUNCHING,
)


def _awaits_resume(workload: WorkloadStatus, now: datetime) -> bool:
    """A scaled-to-zero workload whose request may still resume it, within the retention."""
    if workload.phase != "suspended" or not workload.request_id.isdigit():
        return False
    retention = timedelta(seconds=settings.SUSPENDED_WORKLOAD_RETENTION_SECONDS)
    if workload.suspended_at is None or workload.suspended_at < now - retention:
        return False
    return GpuRequest.objects.filter(
        pk=int(workload.request_id), kind__in=RESUMABLE_KINDS, status__in=RESUMABLE_STATUSES
    ).exists()


def _zombie_pass(
    backend: ClusterBackend, now: datetime, acted: set[tuple[int, int]], outcome: Counter[str]
) -> None:
    """Cluster objects with the portal's labels but no live request are deleted.

    Work that ended in the last few minutes is left to the termination already queued for it.
    A reclaimed notebook or service scaled to zero is kept while it can be resumed (see
    `_awaits_resume`); once its request is cancelled or the retention has passed it is a zombie.
    """
    live = set(
        GpuRequest.objects.filter(
            Q(status__in=(RequestStatus.ADMITTED, RequestStatus.LAUNCHING, RequestStatus.RUNNING))
            | Q(updated_at__gt=now - ZOMBIE_GRACE)
        ).values_list("pk", "attempt")
    )
    live |= acted  # terminations for work reclaimed in this pass are already queued
    list_workloads = getattr(backend, "list_workloads", None)
    if list_workloads is None:
        return
    for workload in list_workloads():
        key = (
            (int(workload.request_id), workload.attempt) if workload.request_id.isdigit() else None
        )
        if key in live or _awaits_resume(workload, now):
            continue
        request = GpuRequest.objects.filter(pk=key[0]).first() if key else None
        # The leftover of work that ended (its request finished, or this was an earlier
        # attempt) is cleanup, not a zombie: it is neither counted nor charted as a reclaim.
        finished = request is not None and (
            request.status in FINISHED_STATUSES or workload.attempt < request.attempt
        )
        backend.terminate(
            workload.namespace,
            workload.request_id,
            workload.attempt,
            reason="finished" if finished else "zombie",
        )
        record_audit_event(
            actor=None,
            action="workload.cleaned_up" if finished else "reclaim.zombie",
            target=request or workload,
            team=request.team if request else None,
            project=request.project if request else None,
            message=f"Deleted {workload.namespace}/{workload.name}: "
            + ("its work has ended." if finished else "no live request owns it."),
            data={"namespace": workload.namespace, "name": workload.name},
        )
        outcome["finished_workloads_removed" if finished else "zombies_removed"] += 1


def enforce_reclaim_policies(
    *, now: datetime | None = None, backend: ClusterBackend | None = None
) -> dict[str, int]:
    """One governance pass: idle ladder, timeouts, stuck and lost work, zombies."""
    now = now or timezone.now()
    policies: dict[int, ReclaimPolicy] = {}
    outcome: Counter[str] = Counter()
    before_live = list(
        GpuRequest.objects.filter(
            status__in=(RequestStatus.LAUNCHING, RequestStatus.RUNNING)
        ).values_list("pk", flat=True)
    )
    _idle_pass(now, policies, outcome)
    _timeout_pass(now, policies, outcome)
    _abnormal_pass(now, policies, outcome)
    acted = set(
        GpuRequest.objects.filter(pk__in=before_live)
        .exclude(status__in=(RequestStatus.LAUNCHING, RequestStatus.RUNNING))
        .values_list("pk", "attempt")
    )
    if backend is not None:
        _zombie_pass(backend, now, acted, outcome)
    else:
        on_each_cluster(lambda cluster, backend: _zombie_pass(backend, now, acted, outcome))
    return dict(outcome)
