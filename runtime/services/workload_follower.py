"""The workload follower: one process that keeps following each cluster's pod watch, so that a
request moves (running, finished, failed) about a second after its pod does, not at the next
periodic sync.

Each round runs the watched sync (`execution.sync_watched_workloads`: a short watch from the
version the last pass reached, then a read of only the workloads that changed, with a full pass
every `FULL_SYNC_SECONDS`) on every cluster whose backend can watch, back to back. After a round
that reached a cluster, the follower leaves a heartbeat for it in the cache; while the heartbeat
is fresh the periodic `sync_workloads` task passes that cluster by, and when the follower stops
or keeps failing it expires and the periodic task takes the cluster back. A simulated cluster
cannot watch: the periodic task keeps it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from django.core.cache import cache
from django.db import close_old_connections

from runtime.cluster.base import ClusterBackend, ClusterError, WatchableClusterBackend
from runtime.services import clusters, execution
from scheduling.dispatch import request_scheduling_cycle
from scheduling.models import Cluster

log = logging.getLogger(__name__)

HEARTBEAT_KEY = "runtime:workload-follower"
# How long the periodic sync leaves a cluster to the follower after its last good round: long
# enough for a round with a full pass on a busy cluster, short enough that a stopped follower's
# clusters go back to the periodic sync within a few of its passes.
HEARTBEAT_SECONDS = 30
# Pause before the next round when no cluster can be followed, or after a failure.
IDLE_SECONDS = 5.0


def heartbeat_key(cluster: Cluster) -> str:
    return f"{HEARTBEAT_KEY}:{cluster.slug}"


def is_followed(cluster: Cluster) -> bool:
    """Whether a follower synced `cluster` within the last HEARTBEAT_SECONDS."""
    try:
        return cache.get(heartbeat_key(cluster)) is not None
    except Exception:
        log.warning("cache unavailable: the periodic sync takes every cluster", exc_info=True)
        return False


def _followable(cluster: Cluster) -> bool:
    try:
        return isinstance(execution.backend_for(cluster), WatchableClusterBackend)
    except ClusterError:
        return False  # the periodic sync meets the error and records it on the cluster


def follow_round() -> list[str]:
    """One watched sync of every cluster that can watch; the slugs of those synced. A cluster
    that fails is recorded on it (`clusters.on_each_cluster`) and left without a heartbeat, so
    the periodic sync retries it; the others count as followed."""
    followed: list[Cluster] = []
    moved: dict[str, int] = {}
    started = time.monotonic()

    def sync(cluster: Cluster, backend: ClusterBackend) -> None:
        counts = execution.sync_watched_workloads(backend=backend, cluster=cluster)
        cache.set(heartbeat_key(cluster), time.time(), timeout=HEARTBEAT_SECONDS)
        followed.append(cluster)
        for status, count in counts.items():
            moved[status] = moved.get(status, 0) + count

    try:
        clusters.on_each_cluster(sync, only=_followable)
    except ClusterError as error:
        log.warning("workload follower: %s", error)
    if moved:
        log.info("moved %s in %.2f s", moved, time.monotonic() - started)
        request_scheduling_cycle()  # finished work frees capacity
    return [cluster.slug for cluster in followed]


def follow(stopping: Callable[[], bool], max_rounds: int = 0) -> int:
    """Follow until `stopping()` says so (or after `max_rounds`, when set); returns the number
    of rounds run."""
    rounds = 0
    while not stopping() and not (max_rounds and rounds >= max_rounds):
        close_old_connections()  # as a Celery task would: a restarted database is met anew
        try:
            followed = follow_round()
        except Exception:
            log.exception("workload follower: the round failed; next round in %ss", IDLE_SECONDS)
            followed = []
        rounds += 1
        if not followed:
            time.sleep(IDLE_SECONDS)  # nothing to follow, or every cluster failed
    return rounds
