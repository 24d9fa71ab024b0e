"""Step 1 of a scheduling cycle: read the database into the engine's frozen Snapshot.

Engine ids are strings: nodes by name, requests by primary key, teams, projects (within their
team) and flavors by slug, so that the reasons the engine gives read as names.
Quotas are counted in flavor units in the portal and in GPU-equivalents in the engine.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection
from datetime import datetime
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone

from scheduling.choices import FlavorKind, Priority, RequestStatus, SharingMode, WorkloadKind
from scheduling.engine import types as engine_types
from scheduling.engine.types import (
    MIG_PROFILES,
    CardUsage,
    DeviceClaim,
    Member,
    Pool,
    Request,
    Snapshot,
    Taint,
    stored_claim_usage,
)
from scheduling.models import (
    POOL_LABEL,
    Allocation,
    Flavor,
    GpuDevice,
    GpuRequest,
    Node,
    NodePool,
    Quota,
)
from scheduling.selectors.foreign_usage import host_left, subtract_foreign_usage
from scheduling.selectors.scheduler_modes import handed_to_kueue
from tenants.models import Membership, Team

ENGINE_PRIORITY: dict[str, engine_types.Priority] = {
    Priority.LOW: engine_types.Priority.LOW,
    Priority.NORMAL: engine_types.Priority.NORMAL,
    Priority.HIGH: engine_types.Priority.HIGH,
    Priority.CRITICAL: engine_types.Priority.CRITICAL,
}
ALL_KINDS = tuple(WorkloadKind.values)


def _taints(raw: list[dict[str, Any]]) -> tuple[Taint, ...]:
    return tuple(Taint(t["key"], t.get("value", ""), t.get("effect", "NoSchedule")) for t in raw)


def _claims(claims: list[dict[str, Any]]) -> tuple[DeviceClaim, ...]:
    return tuple(
        DeviceClaim(
            node_id=c["node"],
            device_index=c["device_index"],
            whole=c.get("whole", False),
            memory_mib=c.get("memory_mib", 0),
            cores_percent=c.get("cores_percent", 0),
            mig_profile=c.get("mig_profile"),
            mig_start=c.get("mig_start"),
        )
        for c in claims
    )


def claims_as_json(claims: tuple[DeviceClaim, ...]) -> list[dict[str, Any]]:
    return [
        {
            "node": c.node_id,
            "device_index": c.device_index,
            "whole": c.whole,
            "memory_mib": c.memory_mib,
            "cores_percent": c.cores_percent,
            "mig_profile": c.mig_profile,
            "mig_start": c.mig_start,
        }
        for c in claims
    ]


def build_snapshot(*, kueue_clusters: Collection[int] = ()) -> Snapshot:
    """The fleet, what runs on it, what waits and the quotas, as one consistent value.

    Each table is read by a function of its own, as plain rows (`values()`): building model
    instances for 50,000 queued requests and their related rows cost most of the read.
    The clusters in `kueue_clusters` are Kueue's (scheduling/selectors/scheduler_modes.py): their
    pools, nodes, cards, allocations and queued requests are left out, so the engine plans the rest.
    """
    kueue = frozenset(kueue_clusters)
    pools = _pools(kueue)
    nodes = _nodes(kueue)
    pool_of_node = {node["name"]: pools[node["pool_id"]] for node in nodes}
    allocations = _allocations(kueue)
    quotas = _quotas()
    return Snapshot(
        pools=tuple(pool for pool in sorted(pools.values(), key=lambda pool: pool.name)),
        nodes=tuple(_engine_node(node, pool_of_node[node["name"]]) for node in nodes),
        devices=_devices(nodes, pool_of_node, allocations, kueue),
        flavors=_flavors(kueue),
        teams=_teams({quota.team for quota in quotas}),
        members=_members(),
        quotas=quotas,
        allocations=tuple(engine_allocation(row) for row in allocations),
        pending=_pending(kueue),
    )


def _pools(kueue: frozenset[int] = frozenset()) -> dict[int, Pool]:
    """Every node pool outside the Kueue clusters, by primary key."""
    return {
        row["pk"]: Pool(
            name=row["slug"],
            tier=row["tier__rank"],
            sharing=row["sharing_mode"],
            scoring=row["scoring"],
            allowed_kinds=tuple(row["allowed_kinds"]) or ALL_KINDS,
            node_selector=((POOL_LABEL, row["slug"]),),
            taints=_taints(row["taints"]),
            short_reserve_fraction=row["short_reserve_fraction"],
            short_max_runtime_seconds=float(row["short_max_runtime_seconds"]),
            lends_unassigned=row["tier__lends_unassigned"],
            display_name=row["name"],
        )
        for row in NodePool.objects.exclude(cluster_id__in=kueue)
        .order_by("slug")
        .values(
            "pk",
            "slug",
            "name",
            "tier__rank",
            "sharing_mode",
            "scoring",
            "allowed_kinds",
            "taints",
            "short_reserve_fraction",
            "short_max_runtime_seconds",
            "tier__lends_unassigned",
        )
    }


def _nodes(kueue: frozenset[int] = frozenset()) -> list[dict[str, Any]]:
    return list(
        Node.objects.exclude(pool__cluster_id__in=kueue)
        .order_by("name")
        .values(
            "name",
            "pool_id",
            "gpu_model",
            "labels",
            "is_schedulable",
            "held_back_reason",
            "mig_layout_problem",
            "foreign_usage",
            "cpu_millicores",
            "memory_mib",
        )
    )


def _engine_node(node: dict[str, Any], pool: Pool) -> engine_types.Node:
    # What the node offers the portal's work: its allocatable minus foreign pods' requests.
    cpu, memory = host_left(node["cpu_millicores"], node["memory_mib"], node["foreign_usage"])
    return engine_types.Node(
        id=node["name"],
        pool=pool.name,
        gpu_model=node["gpu_model"],
        labels=tuple(sorted({**node["labels"], POOL_LABEL: pool.name}.items())),
        taints=pool.taints,
        # A node held back by inventory's access check takes no new work.
        schedulable=node["is_schedulable"] and not node["held_back_reason"],
        cpu_millicores=cpu,
        memory_mib=memory,
        mig_layout_problem=node["mig_layout_problem"],
    )


ALLOCATION_FIELDS = (
    "request_id",
    "claims",
    "started_at",
    "admitted_at",
    "is_preemptible",
    "is_borrowed",
    "request__team__slug",
    "request__project__slug",
    "request__flavor__slug",
    "request__gpu_equivalent",
    "request__max_runtime_seconds",
    "request__priority",
    "request__allow_shared_node",
    "request__cpu_millicores",
    "request__memory_mib",
    "request__owner_id",
)


def _allocations(kueue: frozenset[int] = frozenset()) -> list[dict[str, Any]]:
    """The running allocations outside the Kueue clusters with what the engine needs of their
    requests."""
    return list(
        Allocation.objects.active()
        .exclude(pool__cluster_id__in=kueue)
        .order_by("id")
        .values(*ALLOCATION_FIELDS)
    )


def engine_allocation(row: dict[str, Any]) -> engine_types.Allocation:
    """An allocation row (`ALLOCATION_FIELDS`) as the engine sees running work."""
    return engine_types.Allocation(
        request_id=str(row["request_id"]),
        team=row["request__team__slug"],
        project=row["request__project__slug"],
        flavor=row["request__flavor__slug"],
        gpu_equivalents=float(row["request__gpu_equivalent"]),
        placement=_claims(row["claims"]),
        started_at=(row["started_at"] or row["admitted_at"]).timestamp(),
        max_runtime_seconds=float(row["request__max_runtime_seconds"]),
        priority=ENGINE_PRIORITY[row["request__priority"]],
        preemptible=row["is_preemptible"],
        borrowed=row["is_borrowed"],
        exclusive_node=not row["request__allow_shared_node"],
        # Each of its pods (one per node) holds the request's CPU and memory.
        cpu_millicores=row.get("request__cpu_millicores") or 0,
        memory_mib=row.get("request__memory_mib") or 0,
        owner=str(row.get("request__owner_id") or ""),
    )


def _devices(
    nodes: list[dict[str, Any]],
    pool_of_node: dict[str, Pool],
    allocations: list[dict[str, Any]],
    kueue: frozenset[int] = frozenset(),
) -> tuple[engine_types.GpuDevice, ...]:
    """Every card with what the running allocations and foreign pods leave free on it."""
    used: dict[tuple[str, int], CardUsage] = defaultdict(CardUsage)
    for allocation in allocations:
        for claim in allocation["claims"]:
            key = (claim["node"], claim["device_index"])
            used[key] += stored_claim_usage(claim)

    devices = []
    cards = GpuDevice.objects.exclude(node__pool__cluster_id__in=kueue).order_by(
        "node__name", "index"
    )
    for node_name, index, memory_mib, mig_layout, split_count in cards.values_list(
        "node__name", "index", "memory_mib", "mig_layout", "vgpu_split_count"
    ):
        card = engine_types.GpuDevice(
            node_id=node_name,
            index=index,
            memory_total_mib=memory_mib,
            memory_free_mib=memory_mib,
            mig_capable=pool_of_node[node_name].sharing == SharingMode.MIG,
            # The instances the card really offers (inventory, or the admin's layout).
            mig_layout=tuple(sorted((str(p), int(n)) for p, n in mig_layout.items())),
            # HAMi's split count: the vGPU shares the card may hold.
            vgpu_share_limit=split_count,
        )
        devices.append(card.holding(used[(node_name, index)]))
    # GPUs that pods the portal did not create hold (inventory) are not free either.
    return tuple(
        subtract_foreign_usage(
            devices,
            {node["name"]: node["foreign_usage"] for node in nodes if node["foreign_usage"]},
            {name: pool.sharing for name, pool in pool_of_node.items()},
        )
    )


def _teams(slugs: set[str]) -> tuple[engine_types.Team, ...]:
    """The teams that hold quotas, all in one cohort, with the names people know them by."""
    names = dict(Team.objects.filter(slug__in=slugs).values_list("slug", "name"))
    return tuple(
        engine_types.Team(name=slug, cohort="organisation", display_name=names.get(slug, ""))
        for slug in sorted(slugs)
    )


def _members() -> tuple[Member, ...]:
    """The team members whose fair-share weight is not 1 (the engine weighs anyone else 1), by
    team slug and user id: a request's `owner`."""
    return tuple(
        Member(team=team, name=str(user), weight=float(weight))
        for team, user, weight in Membership.objects.filter(team__isnull=False)
        .exclude(fair_share_weight=1)
        .order_by("team__slug", "user_id")
        .values_list("team__slug", "user_id", "fair_share_weight")
    )


def _flavors(kueue: frozenset[int] = frozenset()) -> tuple[engine_types.Flavor, ...]:
    offered = offered_pools(kueue)
    return tuple(
        engine_types.Flavor(
            id=row["slug"],
            kind=row["kind"],
            gpu_model=row["gpu_model"],
            memory_mib=row["gpu_memory_mib"] if row["kind"] == FlavorKind.VGPU else 0,
            cores_percent=row["gpu_cores_percent"] if row["kind"] == FlavorKind.VGPU else 0,
            mig_profile=row["mig_profile"] if row["mig_profile"] in MIG_PROFILES else None,
            gpu_equivalent=float(row["gpu_equivalent"]),
            # The pools whose cards count as the flavor's capacity (quota lending).
            pools=tuple(sorted({pool for pool, _ in offered.get(row["slug"], ())}))
            or (row["pool__slug"],),
            display_name=row["name"],
        )
        for row in Flavor.objects.order_by("pk").values(
            "slug",
            "name",
            "kind",
            "gpu_model",
            "gpu_memory_mib",
            "gpu_cores_percent",
            "mig_profile",
            "gpu_equivalent",
            "pool__slug",
        )
    )


def _quotas() -> tuple[engine_types.Quota, ...]:
    """Quotas in GPU-equivalents (the portal counts them in flavor units)."""
    return tuple(
        engine_types.Quota(
            team=row["team__slug"],
            flavor=row["flavor__slug"],
            guaranteed=row["guaranteed"] * float(row["flavor__gpu_equivalent"]),
            limit=row["limit"] * float(row["flavor__gpu_equivalent"]),
            project=row["project__slug"],
        )
        for row in Quota.objects.order_by("pk").values(
            "team__slug",
            "flavor__slug",
            "flavor__gpu_equivalent",
            "guaranteed",
            "limit",
            "project__slug",
        )
    )


def offered_pools(
    kueue: frozenset[int] = frozenset(),
) -> dict[str, tuple[tuple[str, int], ...]]:
    """(pool slug, cluster id) of each flavor offered in more than its own pool, by flavor slug.

    Pools in the Kueue clusters `kueue` are left out of the list, which may leave one pool or
    none: the engine places only in portal-mode clusters.
    """
    offered: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for flavor, pool, cluster in Flavor.objects.values_list(
        "slug", "pool__slug", "pool__cluster_id"
    ).order_by("slug"):
        offered[flavor].append((pool, cluster))
    for flavor, pool, cluster in Flavor.other_pools.through.objects.values_list(
        "flavor__slug", "nodepool__slug", "nodepool__cluster_id"
    ).order_by("flavor__slug", "nodepool__slug"):
        offered[flavor].append((pool, cluster))
    return {
        flavor: tuple((pool, cluster) for pool, cluster in pools if cluster not in kueue)
        for flavor, pools in offered.items()
        if len(pools) > 1
    }


def ready_queue() -> QuerySet[GpuRequest]:
    """The queued requests a cycle may admit now: all but crashed work waiting out its retry
    backoff (`retry_not_before` still ahead; runtime/services/crashes.py)."""
    return GpuRequest.objects.filter(status=RequestStatus.QUEUED).exclude(
        retry_not_before__gt=timezone.now()
    )


def _pending(kueue: frozenset[int] = frozenset()) -> tuple[Request, ...]:
    """The queue, oldest first, without the requests handed to Kueue or backing off."""
    offered = offered_pools(kueue)
    queued = ready_queue()
    if kueue:
        queued = queued.exclude(handed_to_kueue(kueue))
    return tuple(
        engine_request(row, offered)
        for row in queued.order_by("created_at", "pk").values(*PENDING_FIELDS)
    )


PENDING_FIELDS = (
    "pk",
    "team__slug",
    "project__slug",
    "flavor__slug",
    "created_at",
    "gpu_count",
    "kind",
    "priority",
    "is_preemptible",
    "allow_shared_node",
    "flavor__gpu_model",
    "gpu_memory_mib",
    "gpu_cores_percent",
    "flavor__mig_profile",
    "max_runtime_seconds",
    "flavor__pool__slug",
    "flavor__pool__cluster_id",
    "cluster_id",
    "cpu_millicores",
    "memory_mib",
    "owner_id",
    "queued_at",
    "reserved_start_at",
)


def engine_request(
    row: dict[str, Any], offered: dict[str, tuple[tuple[str, int], ...]] | None = None
) -> Request:
    """One queued request (a row of `PENDING_FIELDS`) as the engine sees it.

    The request may run in its flavor's pool, or in any of the pools a flavor is offered in
    (`offered_pools`), narrowed to the cluster the request names. The engine keeps it there with
    its pool filter, which skips other pools whole rather than node by node.
    """
    pools = (offered or {}).get(row["flavor__slug"]) or (
        (row["flavor__pool__slug"], row.get("flavor__pool__cluster_id")),
    )
    named = row.get("cluster_id")
    candidates = tuple(pool for pool, cluster in pools if named is None or cluster == named)
    if not candidates:  # none of the flavor's pools is in the named cluster (any more)
        candidates = (f"no pool of {row['flavor__slug']} in the cluster the request names",)
    return Request(
        id=str(row["pk"]),
        team=row["team__slug"],
        project=row["project__slug"],
        flavor=row["flavor__slug"],
        # Keep the original age across preemptions so rescheduled work is not sent to the back.
        submitted_at=row["created_at"].timestamp(),
        gpu_count=row["gpu_count"],
        kind=row["kind"],
        priority=ENGINE_PRIORITY[row["priority"]],
        is_preemptible=row["is_preemptible"],
        allow_shared_node=row["allow_shared_node"],
        pinned_model=row["flavor__gpu_model"],
        vgpu_memory_mib=row["gpu_memory_mib"] or 0,
        vgpu_cores_percent=row["gpu_cores_percent"] or 0,
        mig_profile=row["flavor__mig_profile"] or None,
        max_runtime_seconds=float(row["max_runtime_seconds"]),
        pools=candidates,
        cpu_millicores=row.get("cpu_millicores") or 0,
        memory_mib=row.get("memory_mib") or 0,
        # A batch job may span nodes (a gang, one pod per node); notebooks and services live
        # on one node.
        distributed=row["kind"] == WorkloadKind.JOB,
        # Fair share inside the team; the wait that ages it and earns it a reservation; the
        # reservation the last cycle held for it, which the next one keeps.
        owner=str(row.get("owner_id") or ""),
        queued_at=_seconds(row.get("queued_at")),
        reserved_start_at=_seconds(row.get("reserved_start_at")),
    )


def _seconds(moment: datetime | None) -> float | None:
    return moment.timestamp() if moment is not None else None
