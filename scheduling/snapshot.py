"""Step 1 of a scheduling cycle: read the database into the engine's frozen Snapshot.

Engine ids are strings: nodes by name, requests by primary key, teams, projects (within their
team) and flavors by slug, so that the reasons the engine gives read as names.
Quotas are counted in flavor units in the portal and in GPU-equivalents in the engine.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from scheduling import engine
from scheduling.choices import FlavorKind, Priority, RequestStatus, SharingMode, WorkloadKind
from scheduling.engine.types import MIG_PROFILES, mig_bits
from scheduling.foreign_usage import subtract_foreign_usage
from scheduling.models import Allocation, Flavor, GpuDevice, GpuRequest, Node, NodePool, Quota

POOL_LABEL = "gpu-portal/pool"
ENGINE_PRIORITY: dict[str, engine.Priority] = {
    Priority.LOW: engine.Priority.LOW,
    Priority.NORMAL: engine.Priority.NORMAL,
    Priority.HIGH: engine.Priority.HIGH,
    Priority.CRITICAL: engine.Priority.CRITICAL,
}
ALL_KINDS = tuple(WorkloadKind.values)


def _taints(raw: list[dict[str, Any]]) -> tuple[engine.Taint, ...]:
    return tuple(
        engine.Taint(t["key"], t.get("value", ""), t.get("effect", "NoSchedule")) for t in raw
    )


def _claims(allocation: Allocation) -> tuple[engine.DeviceClaim, ...]:
    return tuple(
        engine.DeviceClaim(
            node_id=c["node"],
            device_index=c["device_index"],
            whole=c.get("whole", False),
            memory_mib=c.get("memory_mib", 0),
            cores_percent=c.get("cores_percent", 0),
            mig_profile=c.get("mig_profile"),
            mig_start=c.get("mig_start"),
        )
        for c in allocation.claims
    )


def claims_as_json(claims: tuple[engine.DeviceClaim, ...]) -> list[dict[str, Any]]:
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


def engine_request(request: GpuRequest) -> engine.Request:
    flavor = request.flavor
    return engine.Request(
        id=str(request.pk),
        team=request.team.slug,
        project=request.project.slug,
        flavor=flavor.slug,
        # Keep the original age across preemptions so rescheduled work is not sent to the back.
        submitted_at=request.created_at.timestamp(),
        gpu_count=request.gpu_count,
        kind=request.kind,
        priority=ENGINE_PRIORITY[request.priority],
        is_preemptible=request.is_preemptible,
        allow_shared_node=request.allow_shared_node,
        pinned_model=flavor.gpu_model,
        vgpu_memory_mib=request.gpu_memory_mib or 0,
        vgpu_cores_percent=request.gpu_cores_percent or 0,
        mig_profile=flavor.mig_profile or None,
        max_runtime_seconds=float(request.max_runtime_seconds),
        node_selector=((POOL_LABEL, flavor.pool.slug),),
    )


def build_snapshot() -> engine.Snapshot:
    """The fleet, what runs on it, what waits and the quotas, as one consistent value."""
    pools = list(NodePool.objects.select_related("tier").order_by("slug"))
    pool_by_id = {pool.pk: pool for pool in pools}
    nodes = list(Node.objects.order_by("name"))
    active = list(
        Allocation.objects.active()
        .select_related("request", "request__team", "request__project", "request__flavor")
        .order_by("id")
    )

    used_memory: dict[tuple[str, int], int] = defaultdict(int)
    used_cores: dict[tuple[str, int], int] = defaultdict(int)
    whole: set[tuple[str, int]] = set()
    mig_mask: dict[tuple[str, int], int] = defaultdict(int)
    exclusive_nodes: set[str] = set()
    for allocation in active:
        for claim in allocation.claims:
            key = (claim["node"], claim["device_index"])
            if claim.get("mig_profile") and claim.get("mig_start") is not None:
                mig_mask[key] |= mig_bits(claim["mig_profile"], claim["mig_start"])
            elif claim.get("whole"):
                whole.add(key)
            else:
                used_memory[key] += claim.get("memory_mib", 0)
                used_cores[key] += claim.get("cores_percent", 0)
            if not allocation.request.allow_shared_node:
                exclusive_nodes.add(claim["node"])

    node_pool = {node.name: pool_by_id[node.pool_id] for node in nodes}
    devices = []
    for device in GpuDevice.objects.select_related("node").order_by("node__name", "index"):
        key = (device.node.name, device.index)
        devices.append(
            engine.GpuDevice(
                node_id=device.node.name,
                index=device.index,
                memory_total_mib=device.memory_mib,
                memory_free_mib=max(0, device.memory_mib - used_memory[key]),
                cores_free_percent=max(0, 100 - used_cores[key]),
                mig_capable=node_pool[device.node.name].sharing_mode == SharingMode.MIG,
                mig_used_mask=mig_mask[key],
                whole_allocated=key in whole,
                # The instances the card really offers (inventory, or the admin's layout).
                mig_layout=tuple(sorted((str(p), int(n)) for p, n in device.mig_layout.items())),
            )
        )

    # GPUs that pods the portal did not create hold (inventory) are not free either.
    devices = subtract_foreign_usage(
        devices,
        {node.name: node.foreign_usage for node in nodes if node.foreign_usage},
        {name: pool.sharing_mode for name, pool in node_pool.items()},
    )

    flavors = list(Flavor.objects.select_related("pool").order_by("pk"))
    unit_equivalent = {flavor.pk: float(flavor.gpu_equivalent) for flavor in flavors}
    teams = sorted({q.team.slug for q in Quota.objects.select_related("team")})
    pending = (
        GpuRequest.objects.filter(status=RequestStatus.QUEUED)
        .select_related("team", "project", "flavor", "flavor__pool")
        .order_by("created_at", "pk")
    )
    return engine.Snapshot(
        pools=tuple(
            engine.Pool(
                name=pool.slug,
                tier=pool.tier.rank,
                sharing=pool.sharing_mode,
                scoring=pool.scoring,
                allowed_kinds=tuple(pool.allowed_kinds) or ALL_KINDS,
                node_selector=((POOL_LABEL, pool.slug),),
                taints=_taints(pool.taints),
                short_reserve_fraction=pool.short_reserve_fraction,
                short_max_runtime_seconds=float(pool.short_max_runtime_seconds),
            )
            for pool in pools
        ),
        nodes=tuple(
            engine.Node(
                id=node.name,
                pool=node_pool[node.name].slug,
                gpu_model=node.gpu_model,
                labels=tuple(
                    sorted({**node.labels, POOL_LABEL: node_pool[node.name].slug}.items())
                ),
                taints=_taints(node_pool[node.name].taints),
                # A node held back by inventory's access check takes no new work.
                schedulable=node.is_schedulable and not node.held_back_reason,
            )
            for node in nodes
        ),
        devices=tuple(devices),
        flavors=tuple(
            engine.Flavor(
                id=flavor.slug,
                kind=flavor.kind,
                gpu_model=flavor.gpu_model,
                memory_mib=flavor.gpu_memory_mib if flavor.kind == FlavorKind.VGPU else 0,
                cores_percent=flavor.gpu_cores_percent if flavor.kind == FlavorKind.VGPU else 0,
                mig_profile=flavor.mig_profile if flavor.mig_profile in MIG_PROFILES else None,
                gpu_equivalent=float(flavor.gpu_equivalent),
            )
            for flavor in flavors
        ),
        teams=tuple(engine.Team(name=slug, cohort="organisation") for slug in teams),
        quotas=tuple(
            engine.Quota(
                team=quota.team.slug,
                flavor=quota.flavor.slug,
                guaranteed=quota.guaranteed * unit_equivalent[quota.flavor_id],
                limit=quota.limit * unit_equivalent[quota.flavor_id],
                project=quota.project.slug if quota.project else None,
            )
            for quota in Quota.objects.select_related("team", "project", "flavor").order_by("pk")
        ),
        allocations=tuple(
            engine.Allocation(
                request_id=str(allocation.request_id),
                team=allocation.request.team.slug,
                project=allocation.request.project.slug,
                flavor=allocation.request.flavor.slug,
                gpu_equivalents=float(allocation.request.gpu_equivalent),
                placement=_claims(allocation),
                started_at=(allocation.started_at or allocation.admitted_at).timestamp(),
                max_runtime_seconds=float(allocation.request.max_runtime_seconds),
                priority=ENGINE_PRIORITY[allocation.request.priority],
                preemptible=allocation.is_preemptible,
                borrowed=allocation.is_borrowed,
                exclusive_node=not allocation.request.allow_shared_node,
            )
            for allocation in active
        ),
        pending=tuple(engine_request(request) for request in pending),
    )
