"""Reads about clusters for the pages: where a request runs, and the fleet grouped by cluster.

A request runs in the cluster of its allocation's pool; one that named a cluster runs only
there. The fleet page shows each cluster's pools under its health (reachable, or its last
error and since when) and its scheduler mode.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils import timezone

from scheduling.models import Allocation, Cluster, GpuRequest, NodePool


def placed_cluster(gpu_request: GpuRequest) -> Cluster | None:
    """The cluster of the pool the request's latest attempt was admitted to, if any."""
    allocation = (
        Allocation.objects.filter(request=gpu_request)
        .select_related("pool__cluster")
        .order_by("-attempt", "-pk")
        .first()
    )
    return allocation.pool.cluster if allocation is not None else None


@dataclass(frozen=True, slots=True)
class ClusterGroup:
    """One cluster on the fleet page: its state, and its pools' rows (as the page had them)."""

    name: str
    slug: str
    api_server: str
    scheduler: str
    is_local: bool
    is_active: bool
    is_reachable: bool
    last_contact_at: datetime | None
    last_error: str
    last_error_at: datetime | None
    pools: list[Any]
    # What reports GPU activity, e.g. "6 GPUs on 2 hosts (NVIDIA L4)": a real cluster whose
    # signal is fresh; empty otherwise (a gap is the page's banner, scheduling.selectors.activity).
    activity_census: str = ""


def fleet_by_cluster(pools: Sequence[Any]) -> list[ClusterGroup]:
    """`pools` (rows with a `pool` slug, e.g. `PoolOverview`) grouped under their clusters.

    Every cluster is listed, with no pools when it has none yet (a registered cluster before its
    first inventory); the local cluster first, then by name.
    """
    now = timezone.now()
    cluster_of = dict(NodePool.objects.values_list("slug", "cluster_id"))
    clusters = sorted(Cluster.objects.all(), key=lambda c: (not c.is_local, c.name.lower()))
    rows: dict[int, list[Any]] = {cluster.pk: [] for cluster in clusters}
    for row in pools:
        cluster_id = cluster_of.get(row.pool)
        if cluster_id in rows:
            rows[cluster_id].append(row)
    return [
        ClusterGroup(
            name=cluster.name,
            slug=cluster.slug,
            api_server=cluster.api_server,
            scheduler=cluster.scheduler_mode,
            is_local=cluster.is_local,
            is_active=cluster.is_active,
            is_reachable=cluster.is_reachable,
            last_contact_at=cluster.last_contact_at,
            last_error=cluster.last_error,
            last_error_at=cluster.last_error_at,
            pools=rows[cluster.pk],
            activity_census=cluster.activity_census
            if cluster.expects_activity_signal and cluster.has_fresh_activity_signal(now=now)
            else "",
        )
        for cluster in clusters
    ]
