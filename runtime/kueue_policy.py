"""The portal's quotas, pools, projects and priorities compiled into Kueue objects
(`SCHEDULER=kueue`): read from the database here, compiled by `runtime.cluster.kueue_objects`,
compared with and applied to the cluster by `reconcile` (`manage.py kueue_policy`, and the
periodic `runtime.tasks.reconcile_kueue_policy`)."""

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
from runtime.execution import PRIORITY_CLASSES
from runtime.propagation import flavor_quota, push_project_quotas
from scheduling.models import Flavor, NodePool, Quota
from scheduling.snapshot import POOL_LABEL
from tenants.models import Project, Team

WEIGHT_PLACES = Decimal("0.001")


def _resource(quota_key: str) -> str:
    return quota_key.removeprefix("requests.")


def current_policy() -> KueuePolicy:
    pools = list(NodePool.objects.order_by("slug"))
    pool_resources: dict[str, set[str]] = defaultdict(set)
    for flavor in Flavor.objects.filter(is_active=True).select_related("pool"):
        pool_resources[flavor.pool.slug].update(_resource(k) for k in flavor_quota(flavor, 1))

    quotas: dict[str, dict[tuple[str, str], tuple[int, int]]] = defaultdict(dict)
    guaranteed_equivalents: dict[str, Decimal] = defaultdict(Decimal)
    rows = Quota.objects.filter(project__isnull=True).select_related("team", "flavor__pool")
    for row in rows:
        team_quotas = quotas[row.team.slug]
        guaranteed = flavor_quota(row.flavor, row.guaranteed)
        for key, limit in flavor_quota(row.flavor, row.limit).items():
            cell = (row.flavor.pool.slug, _resource(key))
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
                node_labels={POOL_LABEL: pool.slug, **pool.node_selector},
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


def reconcile(*, apply: bool, api_client: Any = None) -> list[Change]:
    """What differs between the cluster's Kueue objects and the policy; with `apply`, make the
    cluster match (project namespaces first: the LocalQueues live in them)."""
    from runtime.cluster.kubernetes import KubernetesClusterBackend, load_api_client
    from runtime.cluster.kubernetes_kueue import KueuePolicyClient

    desired = compile_objects(current_policy())
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
