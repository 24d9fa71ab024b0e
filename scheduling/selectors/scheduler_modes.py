"""Who admits a request: the portal's engine or Kueue, decided per cluster (docs/kueue.md).

A cluster's mode is `Cluster.scheduler_mode` (the local cluster follows SCHEDULER, a registered
one its own field). A queued request belongs to the cluster it names; a request naming none
belongs to its flavor's own pool's cluster. When that cluster runs Kueue the request is handed
to Kueue, in the flavor's pool in that cluster; otherwise the engine places it, among the
flavor's pools in portal-mode clusters only (a flavor's other pools in Kueue clusters are
reached by naming the cluster).
"""

from __future__ import annotations

from collections.abc import Collection

from django.db.models import Q

from scheduling.choices import SchedulerMode
from scheduling.models import Cluster, Flavor, NodePool


def kueue_cluster_ids() -> frozenset[int]:
    """The clusters whose requests Kueue admits."""
    return frozenset(
        cluster.pk
        for cluster in Cluster.objects.only("pk", "scheduler", "kubeconfig_sealed")
        if cluster.scheduler_mode == SchedulerMode.KUEUE
    )


def handed_to_kueue(cluster_ids: Collection[int]) -> Q:
    """The requests that belong to one of the Kueue clusters `cluster_ids` (a GpuRequest filter)."""
    ids = list(cluster_ids)
    return Q(cluster_id__in=ids) | Q(cluster__isnull=True, flavor__pool__cluster_id__in=ids)


def request_scheduler_mode(*, flavor: Flavor, cluster: Cluster | None) -> str:
    """The mode of the cluster a request would belong to: the one it names, else its flavor's
    own pool's."""
    return (cluster or flavor.pool.cluster).scheduler_mode


def flavor_pools_in(cluster_id: int) -> dict[int, NodePool]:
    """The pool each flavor runs in on one cluster, by flavor id: its own pool if that is on the
    cluster, else the first (by slug) of its other pools there. Kueue gets one ResourceFlavor per
    pool and the team's quota once per flavor, so a flavor has exactly one pool per cluster."""
    pools: dict[int, NodePool] = {}
    for flavor in Flavor.objects.filter(pool__cluster_id=cluster_id).select_related("pool"):
        pools[flavor.pk] = flavor.pool
    others = Flavor.other_pools.through.objects.filter(nodepool__cluster_id=cluster_id)
    for row in others.select_related("nodepool").order_by("nodepool__slug"):
        pools.setdefault(row.flavor_id, row.nodepool)
    return pools
