"""The resource-access layer: nodes and GPUs the cluster reports, matched onto node pools."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from runtime.cluster.base import NodeInventory
from runtime.cluster.gpu_models import gpu_products_for, merged_aliases, normalise_gpu_model
from scheduling.choices import SharingMode
from scheduling.models import GpuDevice, Node, NodePool
from tenants.services import record_audit_event

DEFAULT_GPU_MEMORY_MIB = 81920


def gpu_model_aliases() -> dict[str, str]:
    """The product → model table: the defaults with GPU_MODEL_ALIASES on top."""
    return merged_aliases(settings.GPU_MODEL_ALIASES)


def gpu_products(model: str) -> tuple[str, ...]:
    """The node label values a workload pinned to `model` may land on (none: any model)."""
    return gpu_products_for(model, gpu_model_aliases()) if model else ()


def pool_for(node: NodeInventory, pools: Sequence[NodePool]) -> NodePool | None:
    """The first pool (by slug) whose node selector the node's labels satisfy."""
    for pool in pools:
        selector = pool.node_selector or {"gpu-portal/pool": pool.slug}
        if all(node.labels.get(key) == value for key, value in selector.items()):
            return pool
    return None


def _device_layouts(node: NodeInventory, pool: NodePool) -> list[tuple[int, dict[str, int]]]:
    """(memory MiB, MIG layout) per physical GPU of the node."""
    if node.hami_devices:
        return [(device.memory_mib, {}) for device in node.hami_devices]
    count = node.gpu_count
    memory = node.gpu_memory_mib or DEFAULT_GPU_MEMORY_MIB
    if pool.sharing_mode != SharingMode.MIG or count == 0:
        return [(memory, {}) for _ in range(count)]
    # The device plugin reports MIG instances per node; spread them evenly over the cards.
    layouts: list[dict[str, int]] = [{} for _ in range(count)]
    for profile, total in sorted(node.mig_devices.items()):
        for index in range(total):
            layout = layouts[index % count]
            layout[profile] = layout.get(profile, 0) + 1
    return [(memory, layout) for layout in layouts]


@transaction.atomic
def apply_inventory(inventory: Sequence[NodeInventory]) -> dict[str, int]:
    """Bring Node and GpuDevice rows in line with the cluster; nodes that vanished stop taking work.

    Returns how many nodes were added, updated and lost.
    """
    pools = list(NodePool.objects.order_by("slug"))
    aliases = gpu_model_aliases()
    now = timezone.now()
    counts = {"added": 0, "updated": 0, "lost": 0}
    seen: set[str] = set()
    for reported in inventory:
        pool = pool_for(reported, pools)
        if pool is None or reported.gpu_count == 0:
            continue
        seen.add(reported.name)
        node, created = Node.objects.update_or_create(
            name=reported.name,
            defaults={
                "pool": pool,
                # The portal's short name (A100-80G), not the product label, so flavors match.
                "gpu_model": normalise_gpu_model(reported.gpu_model, aliases) or "unknown",
                "labels": dict(reported.labels),
                "is_schedulable": reported.ready and reported.schedulable,
                "synced_at": now,
            },
        )
        counts["added" if created else "updated"] += 1
        layouts = _device_layouts(reported, pool)
        for index, (memory, layout) in enumerate(layouts):
            GpuDevice.objects.update_or_create(
                node=node, index=index, defaults={"memory_mib": memory, "mig_layout": layout}
            )
        GpuDevice.objects.filter(node=node, index__gte=len(layouts)).delete()
        if created:
            record_audit_event(actor=None, action="node.discovered", target=node)
    lost = Node.objects.filter(is_schedulable=True).exclude(name__in=seen)
    for node in lost:
        record_audit_event(
            actor=None, action="node.lost", target=node, message="Not reported by the cluster."
        )
    counts["lost"] = lost.update(is_schedulable=False, synced_at=now)
    stamp_unschedulable_nodes(now=now)
    return counts


def stamp_unschedulable_nodes(*, now: datetime) -> None:
    """Record when each node stopped taking work, and forget it once the node is back: the
    reclaim pass only gives up on work after a node stayed away for NODE_LOST_GRACE_SECONDS."""
    Node.objects.filter(is_schedulable=False, unschedulable_since__isnull=True).update(
        unschedulable_since=now
    )
    Node.objects.filter(is_schedulable=True, unschedulable_since__isnull=False).update(
        unschedulable_since=None
    )
