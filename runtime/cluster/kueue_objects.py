"""The portal's policy as Kueue objects, and how the cluster's copy differs from it.

Pure: plain data in, manifests out (no client, no Django). `runtime/services/kueue_policy.py`
reads the database into `KueuePolicy` and talks to the cluster.

The mapping (docs/kueue.md):
- a ResourceFlavor per node pool (the pool's node labels and taints);
- one Cohort for the organisation;
- a ClusterQueue per team in that cohort: per flavor and resource, nominal quota = the team's
  guaranteed amount and borrowing limit = limit − guaranteed, with the team's fair-sharing weight
  (its share of all guaranteed GPU-equivalents, the weight the portal's own engine uses);
- a LocalQueue per project namespace, pointing at its team's ClusterQueue;
- a WorkloadPriorityClass per portal priority.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from runtime.cluster.names import MANAGED_BY_LABEL, MANAGED_BY_VALUE, TEAM_LABEL, is_dns_label
from runtime.cluster.quantities import quantity

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
API_VERSION = f"{GROUP}/{VERSION}"
COHORT_NAME = "gpu-portal"
LOCAL_QUEUE_NAME = "gpu-portal"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
CLUSTER_QUEUE_PREFIX = "gpu-portal-"

# Kind -> (plural, namespaced), in the order they are applied (referenced objects first).
KINDS: dict[str, tuple[str, bool]] = {
    "WorkloadPriorityClass": ("workloadpriorityclasses", False),
    "ResourceFlavor": ("resourceflavors", False),
    "Cohort": ("cohorts", False),
    "ClusterQueue": ("clusterqueues", False),
    "LocalQueue": ("localqueues", True),
}

Manifest = dict[str, Any]


@dataclass(frozen=True)
class PoolFlavor:
    """One node pool as a ResourceFlavor: the labels its nodes carry, the taints they have."""

    name: str
    node_labels: Mapping[str, str] = field(default_factory=dict)
    node_taints: tuple[Mapping[str, str], ...] = ()


@dataclass(frozen=True)
class TeamQueue:
    """A team's ClusterQueue: `quotas[(pool, resource)] = (guaranteed, limit)` and its weight."""

    team_slug: str
    weight: Decimal
    quotas: Mapping[tuple[str, str], tuple[int, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class KueuePolicy:
    pools: Sequence[PoolFlavor]
    teams: Sequence[TeamQueue]
    project_namespaces: Mapping[str, str]  # namespace -> team slug
    priorities: Mapping[str, int]  # WorkloadPriorityClass name -> value
    # The resources each pool's requests can ask for (e.g. nvidia.com/gpu, nvidia.com/mig-1g.10gb).
    pool_resources: Mapping[str, frozenset[str]] = field(default_factory=dict)


def cluster_queue_name(team_slug: str) -> str:
    return f"{CLUSTER_QUEUE_PREFIX}{team_slug}"


def _metadata(name: str, namespace: str | None = None, **labels: str) -> dict[str, Any]:
    if not is_dns_label(name):
        raise ValueError(f"{name!r} is not a DNS-1123 label and cannot name a Kueue object")
    metadata: dict[str, Any] = {"name": name, "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE}}
    metadata["labels"].update(labels)
    if namespace is not None:
        metadata["namespace"] = namespace
    return metadata


def resource_groups(
    pool_resources: Mapping[str, frozenset[str]],
) -> list[tuple[list[str], list[str]]]:
    """Pools grouped so that no resource is covered twice: Kueue wants the resource groups of a
    ClusterQueue disjoint, and every flavor of a group to list all of the group's resources.
    Pools sharing a resource (whole cards and vGPU both count `nvidia.com/gpu`) share a group.
    Returns (resources, pools) per group, both sorted."""
    groups: list[tuple[set[str], set[str]]] = []
    for pool in sorted(pool_resources):
        resources = set(pool_resources[pool])
        pools = {pool}
        for group in [g for g in groups if g[0] & resources]:
            groups.remove(group)
            resources |= group[0]
            pools |= group[1]
        groups.append((resources, pools))
    return sorted((sorted(r), sorted(p)) for r, p in groups)


def _quantity(value: int | Decimal) -> str:
    return str(value) if isinstance(value, int) else format(value.normalize(), "f")


def cluster_queue(team: TeamQueue, policy: KueuePolicy) -> Manifest:
    groups = []
    for resources, pools in resource_groups(policy.pool_resources):
        flavors = []
        for pool in pools:
            entries = []
            for resource in resources:
                guaranteed, limit = team.quotas.get((pool, resource), (0, 0))
                entries.append(
                    {
                        "name": resource,
                        "nominalQuota": _quantity(guaranteed),
                        "borrowingLimit": _quantity(max(limit - guaranteed, 0)),
                    }
                )
            flavors.append({"name": pool, "resources": entries})
        groups.append({"coveredResources": resources, "flavors": flavors})
    return {
        "apiVersion": API_VERSION,
        "kind": "ClusterQueue",
        "metadata": _metadata(cluster_queue_name(team.team_slug), **{TEAM_LABEL: team.team_slug}),
        "spec": {
            "cohortName": COHORT_NAME,
            # The team's project namespaces only, by the label the portal puts on them.
            "namespaceSelector": {"matchLabels": {TEAM_LABEL: team.team_slug}},
            "queueingStrategy": "BestEffortFIFO",
            "fairSharing": {"weight": _quantity(team.weight)},
            "preemption": {
                "reclaimWithinCohort": "Any",
                "borrowWithinCohort": {"policy": "LowerPriority"},
                "withinClusterQueue": "LowerPriority",
            },
            "resourceGroups": groups,
        },
    }


def compile_objects(policy: KueuePolicy) -> list[Manifest]:
    """Every object the policy needs, in apply order."""
    objects: list[Manifest] = []
    for name, value in sorted(policy.priorities.items()):
        objects.append(
            {
                "apiVersion": API_VERSION,
                "kind": "WorkloadPriorityClass",
                "metadata": _metadata(name),
                "value": value,
                "description": f"GPU Portal priority {name}",
            }
        )
    for pool in sorted(policy.pools, key=lambda p: p.name):
        spec: dict[str, Any] = {}
        if pool.node_labels:
            spec["nodeLabels"] = dict(pool.node_labels)
        if pool.node_taints:
            spec["nodeTaints"] = [dict(t) for t in pool.node_taints]
        objects.append(
            {
                "apiVersion": API_VERSION,
                "kind": "ResourceFlavor",
                "metadata": _metadata(pool.name),
                "spec": spec,
            }
        )
    objects.append(
        {
            "apiVersion": API_VERSION,
            "kind": "Cohort",
            "metadata": _metadata(COHORT_NAME),
            "spec": {},
        }
    )
    objects.extend(
        cluster_queue(team, policy) for team in sorted(policy.teams, key=lambda t: t.team_slug)
    )
    for namespace, team_slug in sorted(policy.project_namespaces.items()):
        objects.append(
            {
                "apiVersion": API_VERSION,
                "kind": "LocalQueue",
                "metadata": _metadata(LOCAL_QUEUE_NAME, namespace, **{TEAM_LABEL: team_slug}),
                "spec": {"clusterQueue": cluster_queue_name(team_slug)},
            }
        )
    return objects


# Differences ------------------------------------------------------------------------------


def object_key(manifest: Manifest) -> tuple[str, str, str]:
    metadata = manifest["metadata"]
    return (manifest["kind"], metadata.get("namespace", ""), metadata["name"])


def _differences(desired: Any, live: Any, path: str) -> list[str]:
    """Where `live` does not hold what `desired` says; keys the API server defaulted (present
    in `live` only) are not differences."""
    if isinstance(desired, dict):
        if not isinstance(live, dict):
            return [path or "."]
        found: list[str] = []
        for key, value in desired.items():
            found += _differences(value, live.get(key), f"{path}.{key}" if path else key)
        return found
    if isinstance(desired, list):
        if not isinstance(live, list) or len(live) != len(desired):
            return [path]
        found = []
        for index, (want, have) in enumerate(zip(desired, live, strict=True)):
            found += _differences(want, have, f"{path}[{index}]")
        return found
    return [] if _same_scalar(desired, live) else [path]


def quantity_value(value: Any) -> Decimal | None:
    """`"602m"` → 0.602, `"1Ki"` → 1024, `"1e3"` → 1000, `2` → 2; None if not a quantity."""
    try:
        return quantity(value)
    except ValueError:
        return None


def _same_scalar(desired: Any, live: Any) -> bool:
    if desired == live:
        return True
    # Quantities come back in another spelling: "1" and 1, "0.50" and "0.5", and Kueue's
    # controller rewrites a weight of "0.602" as "602m" when it updates the object.
    if isinstance(desired, bool) or isinstance(live, bool):
        return False
    wanted, found = quantity_value(desired), quantity_value(live)
    return wanted is not None and wanted == found


@dataclass(frozen=True)
class Change:
    """One object to create, update or delete, with the fields that differ (for updates)."""

    action: str  # "create" | "update" | "delete"
    kind: str
    namespace: str
    name: str
    fields: tuple[str, ...] = ()

    def __str__(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        detail = f" ({', '.join(self.fields)})" if self.fields else ""
        return f"{self.action} {self.kind} {where}{detail}"


def changes(desired: Iterable[Manifest], live: Iterable[Manifest]) -> list[Change]:
    """What applying `desired` would change on a cluster holding `live` (the portal's objects)."""
    live_by_key = {object_key(m): m for m in live}
    found: list[Change] = []
    desired_keys = set()
    for manifest in desired:
        key = object_key(manifest)
        desired_keys.add(key)
        current = live_by_key.get(key)
        if current is None:
            found.append(Change("create", *key))
            continue
        compared = {
            k: v for k, v in manifest.items() if k not in ("apiVersion", "kind", "metadata")
        }
        compared["labels"] = manifest["metadata"].get("labels", {})
        current_view = {k: v for k, v in current.items() if k != "metadata"}
        current_view["labels"] = current.get("metadata", {}).get("labels", {})
        fields = _differences(compared, current_view, "")
        if fields:
            found.append(Change("update", *key, fields=tuple(fields)))
    found.extend(Change("delete", *key) for key in sorted(set(live_by_key) - desired_keys))
    return found
