"""Reads of the reclamation rules that apply to a request, shown on the request's page."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.utils import timezone

from scheduling.choices import WorkloadKind
from scheduling.engine.reserve import format_duration
from scheduling.models import Allocation, GpuRequest, ReclaimPolicy
from scheduling.reclaim_rules import idle_verdict
from scheduling.selectors.activity import IdleObservation, idle_observation


@dataclass(frozen=True, slots=True)
class GovernanceRules:
    """The reclamation rules that apply to one request, and where it stands on them now.

    Shown on the request page so that owners see the rule and the countdown before anything
    is reclaimed ("visible to users"), computed with the same pure rules the reclaim pass uses.
    """

    idle_rule: str
    idle_reclaim_at: datetime | None
    idle_seconds: float
    stops_at: datetime | None
    timeout_rule: str
    retry_rule: str
    short_reserve: str
    # No fresh GPU activity from the cluster: the idle ladder waits (never reclaims on no data).
    idle_paused: bool = False


def governance_rules(*, gpu_request: GpuRequest, now: datetime | None = None) -> GovernanceRules:
    """Idle, timeout and retry rules of the request's tier, with its idle and runtime deadlines."""
    now = now or timezone.now()
    pool = gpu_request.flavor.pool
    policy = ReclaimPolicy.objects.filter(tier_id=pool.tier_id).first() or ReclaimPolicy()
    window = (
        policy.notebook_idle_window_seconds
        if gpu_request.kind == WorkloadKind.NOTEBOOK
        else policy.idle_window_seconds
    )
    idle_rule = (
        f"GPU activity under {policy.idle_threshold_percent}% for {format_duration(window)}: "
        f"warned {format_duration(policy.idle_warning_seconds)} before, then "
        + ("reclaimed" if policy.reclaim_idle else "reported (reclaim is off for this tier)")
        + (
            "; notebooks and services can be resumed"
            if gpu_request.kind != WorkloadKind.JOB
            else ""
        )
    )
    timeout_rule = (
        f"stopped at its max runtime ({format_duration(gpu_request.max_runtime_seconds)}), "
        f"warned {format_duration(policy.timeout_warning_seconds)} before; "
        "your lead can extend it"
    )
    retry_rule = (
        "preempted work goes back to the queue with its original age; work lost to a node "
        f"failure or a stuck start is retried up to {policy.max_attempts} attempts"
    )
    allocation = (
        Allocation.objects.active()
        .filter(request=gpu_request, started_at__isnull=False)
        .select_related("pool__cluster")
        .first()
    )
    observation: IdleObservation | None = None
    idle_reclaim_at: datetime | None = None
    idle_seconds = 0.0
    stops_at: datetime | None = None
    idle_paused = False
    if allocation is not None and allocation.started_at is not None:
        stops_at = allocation.started_at + timedelta(seconds=gpu_request.max_runtime_seconds)
        observation = idle_observation(
            allocation=allocation, cluster=allocation.pool.cluster, window_seconds=window, now=now
        )
        idle_paused = observation is None
    if allocation is not None and observation is not None:
        verdict = idle_verdict(
            observation.samples,
            now=now.timestamp(),
            started_at=observation.observed_from,
            threshold_percent=policy.idle_threshold_percent,
            window_seconds=window,
            warning_seconds=policy.idle_warning_seconds,
            warned_at=gpu_request.idle_warned_at.timestamp()
            if gpu_request.idle_warned_at
            else None,
            exempt_until=gpu_request.idle_exempt_until.timestamp()
            if gpu_request.idle_exempt_until
            else None,
        )
        if verdict.stage in ("warn", "reclaim") and verdict.reclaim_at is not None:
            idle_reclaim_at = datetime.fromtimestamp(verdict.reclaim_at, tz=UTC)
        idle_seconds = verdict.idle_seconds
    return GovernanceRules(
        idle_rule=idle_rule,
        idle_reclaim_at=idle_reclaim_at,
        idle_seconds=idle_seconds,
        stops_at=stops_at,
        timeout_rule=timeout_rule,
        retry_rule=retry_rule,
        short_reserve=pool.short_reserve_label,
        idle_paused=idle_paused,
    )
