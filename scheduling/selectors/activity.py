"""Reads of the GPU activity signal: which clusters have none, and what idle reclaim may judge.

A real cluster's GPU activity comes from its Prometheus; while none comes (a gap the poll
recorded, or a last sample older than ACTIVITY_SIGNAL_MAX_AGE_SECONDS), idle reclaim pauses for
the cluster's work and the gap shows on the fleet page, in /readyz and in /metrics. After a gap,
the idle ladder starts again from when the signal came back: the time without data never counts
as idle.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings

from scheduling.models import Allocation, Cluster, UtilisationSample


@dataclass(frozen=True, slots=True)
class ActivityGap:
    """A real cluster without fresh GPU activity: since when, and why (as far as known)."""

    name: str
    slug: str
    since: datetime | None  # the last activity, or the first failed poll; None: never polled
    reason: str


def activity_gap(cluster: Cluster, *, now: datetime) -> ActivityGap | None:
    """The cluster's gap in GPU activity, or None while its signal is fresh (or simulated)."""
    if cluster.has_fresh_activity_signal(now=now):
        return None
    if cluster.activity_gap_since is not None:
        since, reason = cluster.activity_gap_since, cluster.activity_gap_reason
    elif cluster.activity_signal_at is not None:
        since, reason = cluster.activity_signal_at, "No utilisation poll has run since."
    else:
        since, reason = None, "No utilisation poll has run yet."
    return ActivityGap(name=cluster.name, slug=cluster.slug, since=since, reason=reason)


def activity_gaps(*, now: datetime) -> list[ActivityGap]:
    """Every real cluster without fresh GPU activity, by name."""
    gaps = (activity_gap(cluster, now=now) for cluster in Cluster.objects.order_by("name"))
    return [gap for gap in gaps if gap is not None]


@dataclass(frozen=True, slots=True)
class IdleObservation:
    """What the idle ladder may judge an allocation on: (time, percent) samples, oldest first,
    from `observed_from` on (the start of the work, or when its cluster's signal came back)."""

    samples: list[tuple[float, float]]
    observed_from: float


def idle_observation(
    *, allocation: Allocation, cluster: Cluster, window_seconds: float, now: datetime
) -> IdleObservation | None:
    """The samples the idle ladder may use, or None while it must pause: the cluster has no
    fresh activity signal, or the allocation's own newest sample is too old (a real cluster)."""
    assert allocation.started_at is not None
    since = now - timedelta(seconds=window_seconds * 2)
    observed_from = allocation.started_at
    if cluster.expects_activity_signal:
        if not cluster.has_fresh_activity_signal(now=now):
            return None
        if cluster.activity_signal_since is not None:
            since = max(since, cluster.activity_signal_since)
            observed_from = max(observed_from, cluster.activity_signal_since)
    samples = [
        (moment.timestamp(), activity)
        for moment, activity in UtilisationSample.objects.filter(
            allocation=allocation, sampled_at__gte=since
        )
        .order_by("sampled_at")
        .values_list("sampled_at", "activity_percent")
    ]
    max_age = settings.ACTIVITY_SIGNAL_MAX_AGE_SECONDS
    if cluster.expects_activity_signal and samples and samples[-1][0] < now.timestamp() - max_age:
        return None
    return IdleObservation(samples=samples, observed_from=observed_from.timestamp())
