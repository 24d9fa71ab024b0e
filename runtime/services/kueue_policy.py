"""The portal's quotas, pools, projects and priorities compiled into Kueue objects for one
Kueue-mode cluster: read from the database here, compiled by `runtime.cluster.kueue_objects`,
compared with and applied to that cluster by `reconcile` (`manage.py kueue_policy`, and the
periodic `runtime.tasks.reconcile_kueue_policy`, once per Kueue-mode cluster).

Per cluster: the ResourceFlavors (that cluster's pools), the quota cells (each flavor in its pool
on that cluster, `scheduling.selectors.scheduler_modes.flavor_pools_in`) and the fair-sharing
weights (the teams' shares of the guaranteed quota on that cluster). The same on every cluster:
the cohort, one ClusterQueue per team, a LocalQueue per project, the priority classes."""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal
from typing import Any

from django.conf import settings

from runtime.cluster.kueue_objects import (
    Change,
    KueuePolicy,
    PoolFlavor,
    TeamQueue,
    changes,
    compile_objects,
    object_key,
)
from runtime.services.execution import PRIORITY_CLASSES, backend_for
from runtime.services.propagation import flavor_quota, push_project_quotas
from scheduling.models import LOCAL_CLUSTER_SLUG, Cluster, Flavor, NodePool, Quota
from scheduling.selectors.scheduler_modes import flavor_pools_in
from tenants.models import Project, Team

WEIGHT_PLACES = Decimal("0.001")


def _resource(quota_key: str) -> str:
    return quota_key.removeprefix("requests.")


def local_cluster() -> Cluster | None:
    """This deployment's own cluster (None before any pool made it)."""
    return Cluster.objects.filter(slug=LOCAL_CLUSTER_SLUG).first()


def current_policy(cluster: Cluster | None = None) -> KueuePolicy:
    """The policy for `cluster`'s Kueue (by default the local cluster's)."""
    cluster = cluster or local_cluster()
    pools = list(NodePool.objects.filter(cluster=cluster).order_by("slug")) if cluster else []
    pool_of_flavor = flavor_pools_in(cluster.pk) if cluster else {}
    pool_resources: dict[str, set[str]] = defaultdict(set)
    for flavor in Flavor.objects.filter(is_active=True, pk__in=list(pool_of_flavor)):
        pool = pool_of_flavor[flavor.pk]
        pool_resources[pool.slug].update(_resource(k) for k in flavor_quota(flavor, 1))

    quotas: dict[str, dict[tuple[str, str], tuple[int, int]]] = defaultdict(dict)
    guaranteed_equivalents: dict[str, Decimal] = defaultdict(Decimal)
    rows = Quota.objects.filter(
        project__isnull=True, flavor_id__in=list(pool_of_flavor)
    ).select_related("team", "flavor__pool")
    for row in rows:
        team_quotas = quotas[row.team.slug]
        guaranteed = flavor_quota(row.flavor, row.guaranteed)
        for key, limit in flavor_quota(row.flavor, row.limit).items():
            cell = (pool_of_flavor[row.flavor_id].slug, _resource(key))
            have_guaranteed, have_limit = team_quotas.get(cell, (0, 0))
            team_quotas[cell] = (have_guaranteed + guaranteed[key], have_limit + limit)
        guaranteed_equivalents[row.team.slug] += row.guaranteed * Decimal(row.flavor.gpu_equivalent)

    total = sum(guaranteed_equivalents.values())
    teams = []
    for team in Team.objects.order_by("slug"):
        share = guaranteed_equivalents[team.slug] / total if total else Decimal(1)
        # Kueue treats a zero weight as "never ahead of anyone"; keep a floor like the engine's.
        weight = max(share.quantize(WEIGHT_PLACES), WEIGHT_PLACES)
        teams.append(TeamQueue(team.slug, weight, dict(quotas[team.slug])))
    return KueuePolicy(
        pools=[
            PoolFlavor(
                name=pool.slug,
                # The pool label too: the portal's Jobs select it, so Kueue matches the flavor
                # even for a pool whose own node selector is empty.
                node_labels=pool.node_labels,
                node_taints=tuple(dict(t) for t in pool.taints),
            )
            for pool in pools
        ],
        teams=teams,
        project_namespaces={
            p.namespace: p.team.slug for p in Project.objects.select_related("team")
        },
        priorities={spec.name: spec.value for spec in PRIORITY_CLASSES.values()},
        pool_resources={pool: frozenset(r) for pool, r in pool_resources.items()},
    )


def reconcile(
    *, apply: bool, api_client: Any = None, cluster: Cluster | None = None
) -> list[Change]:
    """What differs between `cluster`'s Kueue objects (by default the local cluster's) and its
    policy; with `apply`, make the cluster match (project namespaces first: the LocalQueues live
    in them). The local cluster is reached with KUBECONFIG and KUBE_CONTEXT, a registered one
    with its own kubeconfig (`execution.backend_for`)."""
    from runtime.cluster.kubernetes import KubernetesClusterBackend, load_api_client
    from runtime.cluster.kubernetes_kueue import KueuePolicyClient

    cluster = cluster or local_cluster()
    desired = compile_objects(current_policy(cluster))
    if api_client is None and cluster is not None and not cluster.is_local:
        api_client = getattr(backend_for(cluster), "api_client", None)
    if api_client is None:
        api_client = load_api_client(settings.KUBECONFIG or None, settings.KUBE_CONTEXT)
    client = KueuePolicyClient(api_client)
    pending = changes(desired, client.live_objects())
    if apply and pending:
        push_project_quotas(
            project_ids=Project.objects.values_list("pk", flat=True),
            backend=KubernetesClusterBackend(api_client=api_client),
        )
        by_key = {object_key(m): m for m in desired}
        for change in pending:
            if change.action == "delete":
                client.delete(change)
            else:
                client.apply(by_key[(change.kind, change.namespace, change.name)])
    return pending
