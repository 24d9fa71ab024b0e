"""The resource-access layer: nodes and GPUs the cluster reports, matched onto node pools."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from runtime.cluster.base import NodeInventory
from runtime.cluster.gpu_models import gpu_products_for, merged_aliases, normalise_gpu_model
from scheduling.choices import DeviceAllocation, FlavorKind, SharingMode
from scheduling.engine.mig import layout_fits, mig_gpu, read_node_layout
from scheduling.models import Cluster, Flavor, GpuDevice, Node, NodePool
from tenants.models import AuditEvent
from tenants.services.organisation import record_audit_event

log = logging.getLogger(__name__)

DEFAULT_GPU_MEMORY_MIB = 81920


def gpu_model_aliases() -> dict[str, str]:
    """The product → model table: the defaults with GPU_MODEL_ALIASES on top."""
    return merged_aliases(settings.GPU_MODEL_ALIASES)


def gpu_products(model: str) -> tuple[str, ...]:
    """The node label values a workload pinned to `model` may land on (none: any model)."""
    return gpu_products_for(model, gpu_model_aliases()) if model else ()


def pool_for(node: NodeInventory, pools: Sequence[NodePool]) -> NodePool | None:
    """The first pool (by slug) whose node labels (`NodePool.node_labels`) the node carries."""
    for pool in pools:
        if all(node.labels.get(key) == value for key, value in pool.node_labels.items()):
            return pool
    return None


def _device_layouts(
    node: NodeInventory, pool: NodePool, model: str | None
) -> tuple[list[tuple[int, dict[str, int]]], str]:
    """(memory MiB, MIG layout) per physical GPU of the node, and why its MIG layout cannot be
    read ("" when it can, or the pool is not a MIG pool).

    A MIG node's layout comes from the cluster: card by card when the backend knows it, else
    read from its `nvidia.com/mig.config` label and advertised `nvidia.com/mig-*` counts
    (`read_node_layout`). A node whose layout cannot be read keeps empty layouts and is held
    back from MIG work.
    """
    if node.hami_devices:
        return [(device.memory_mib, {}) for device in node.hami_devices], ""
    count = node.gpu_count
    memory = node.gpu_memory_mib or DEFAULT_GPU_MEMORY_MIB
    if pool.sharing_mode != SharingMode.MIG or count == 0 or not any(node.mig_devices.values()):
        return [(memory, {}) for _ in range(count)], ""
    if node.mig_layouts is not None and len(node.mig_layouts) == count:
        gpu = mig_gpu(model)
        bad = [i for i, c in enumerate(node.mig_layouts) if gpu is None or not layout_fits(gpu, c)]
        if not bad:
            return [(memory, dict(layout)) for layout in node.mig_layouts], ""
        problem = f"cards {bad} report layouts that {model} cannot hold."
    else:
        reading = read_node_layout(
            gpu_model=model, gpu_count=count, labels=node.labels, advertised=node.mig_devices
        )
        if not reading.problem:
            return [(memory, dict(layout)) for layout in reading.cards], ""
        problem = reading.problem
    return [(memory, {}) for _ in range(count)], problem


def mig_layout_sentence(problem: str) -> str:
    """The held-back reason of a node whose MIG layout cannot be read."""
    return f"Its MIG layout cannot be read, so it is not offered for MIG work: {problem}"


def _split_counts(node: NodeInventory) -> list[int]:
    """HAMi's split count per card (how many vGPU shares it may hold), 0 where not registered."""
    return [device.split_count for device in node.hami_devices]


def access_problem(node: NodeInventory, pool: NodePool, mig_profiles: Sequence[str]) -> str:
    """Why the node cannot serve its pool's sharing mode, or "" when it can.

    The engine places work of the pool's mode on every node of the pool, and the workload asks
    the cluster for that mode's resources; a node that does not advertise them would leave the
    work pending forever. vGPU nodes need HAMi's `nvidia.com/gpumem` and `nvidia.com/gpucores`,
    MIG nodes the `nvidia.com/mig-<profile>` instances of the pool's flavors (any, when it has
    none yet), whole-card nodes `nvidia.com/gpu`, and not as HAMi's shares. Nodes of a DRA
    pool need GPUs in the DRA driver's ResourceSlices instead.
    """
    have = {name for name, amount in node.allocatable.items() if _positive(amount)}
    if pool.allocation == DeviceAllocation.DRA:
        if node.dra_gpu_count == 0:
            return (
                f"Pool {pool.name} allocates cards through DRA, but no ResourceSlice of "
                "gpu.nvidia.com lists GPUs on the node (is NVIDIA's DRA driver running there?)."
            )
        return ""
    if pool.sharing_mode == SharingMode.VGPU:
        missing = [r for r in ("nvidia.com/gpumem", "nvidia.com/gpucores") if r not in have]
        if missing:
            return (
                f"Pool {pool.name} shares cards through HAMi, but the node advertises no "
                f"{' or '.join(missing)} (is HAMi's device plugin running there?)."
            )
        return ""
    if pool.sharing_mode == SharingMode.MIG:
        offered = sorted(node.mig_devices)
        wanted = [p for p in mig_profiles if p in node.mig_devices and node.mig_devices[p] > 0]
        if not any(node.mig_devices.values()):
            return (
                f"Pool {pool.name} runs MIG instances, but the node advertises no "
                "nvidia.com/mig-* resources (MIG mode off, or the device plugin's strategy "
                "is not mixed?)."
            )
        if mig_profiles and not wanted:
            return (
                f"Pool {pool.name} offers {', '.join(mig_profiles)}, but the node advertises "
                f"only {', '.join(offered)}."
            )
        return ""
    if "nvidia.com/gpu" not in have:
        return (
            f"Pool {pool.name} gives whole cards, but the node advertises no nvidia.com/gpu "
            "(is the NVIDIA device plugin running there?)."
        )
    if node.hami_devices:
        return (
            f"Pool {pool.name} gives whole cards, but the node's nvidia.com/gpu are HAMi's "
            "vGPU shares; move it to a vGPU pool."
        )
    return ""


def _positive(amount: str) -> bool:
    try:
        return float(amount) > 0
    except ValueError:
        return amount not in ("", "0")


def _mig_profiles_by_pool() -> dict[int, list[str]]:
    profiles: dict[int, list[str]] = {}
    flavors = Flavor.objects.filter(kind=FlavorKind.MIG).exclude(mig_profile="")
    for pool_id, profile in flavors.values_list("pool_id", "mig_profile").order_by("mig_profile"):
        profiles.setdefault(pool_id, []).append(profile)
    return profiles


# What a sync sets on a node besides `synced_at`; a node whose values all match is not rewritten.
NODE_FIELDS = (
    "pool",
    "gpu_model",
    "labels",
    "is_schedulable",
    "held_back_reason",
    "mig_layout_problem",
    "foreign_usage",
    "cpu_millicores",
    "memory_mib",
)
NODE_COLUMNS = ("pool_id", *NODE_FIELDS[1:])


@transaction.atomic
def apply_inventory(
    inventory: Sequence[NodeInventory], *, cluster: Cluster | None = None
) -> dict[str, int]:
    """Bring Node and GpuDevice rows in line with the cluster; nodes that vanished stop taking work.

    Set-wise, so a fleet of thousands costs a bounded number of statements: (1) read the known
    nodes and their cards, (2) decide per node, (3) upsert only the nodes and cards that changed
    (`bulk_create(update_conflicts=True)`), stamp every reported node in one UPDATE, delete cards
    that are gone, and insert the audit events in bulk. Returns how many nodes were added,
    updated, lost and held back.
    """
    pools = list(NodePool.objects.filter(**_in(cluster, "cluster")).order_by("slug"))
    aliases = gpu_model_aliases()
    now = timezone.now()
    counts = {"added": 0, "updated": 0, "lost": 0, "held_back": 0}
    mig_profiles = _mig_profiles_by_pool()
    # 1. Read what the database knows.
    known = {node.name: node for node in Node.objects.filter(**_in(cluster, "pool__cluster"))}
    # Node names are the engine's ids, so they are unique across clusters: a node named like one
    # of another cluster's is not taken in (see docs/clusters.md).
    taken = set(
        Node.objects.exclude(**_in(cluster, "pool__cluster")).values_list("name", flat=True)
        if cluster is not None
        else ()
    )
    cards: dict[int, dict[int, tuple[int, dict[str, int], int]]] = {}
    for node_id, index, memory, layout, split in GpuDevice.objects.values_list(
        "node_id", "index", "memory_mib", "mig_layout", "vgpu_split_count"
    ).order_by():
        cards.setdefault(node_id, {})[index] = (memory, layout, split)
    # 2. Decide, node by node, in memory.
    seen: set[str] = set()
    upserts: list[Node] = []
    layouts_by_name: dict[str, list[tuple[int, dict[str, int]]]] = {}
    splits_by_name: dict[str, list[int]] = {}
    events: list[tuple[str, str, str]] = []  # (node name, action, message)
    for reported in inventory:
        pool = pool_for(reported, pools)
        if pool is None or reported.gpu_count == 0 or reported.name in seen:
            continue
        if reported.name in taken:
            log.warning("node %s is already known in another cluster; ignored", reported.name)
            continue
        seen.add(reported.name)
        problem = access_problem(reported, pool, mig_profiles.get(pool.pk, []))
        # The portal's short name (A100-80G), not the product label, so flavors match.
        model = normalise_gpu_model(reported.gpu_model, aliases)
        layouts, layout_problem = _device_layouts(reported, pool, model)
        problem = problem or (mig_layout_sentence(layout_problem) if layout_problem else "")
        wanted = Node(
            name=reported.name,
            pool=pool,
            gpu_model=model or "unknown",
            labels=dict(reported.labels),
            is_schedulable=reported.ready and reported.schedulable,
            held_back_reason=problem,
            mig_layout_problem=layout_problem,
            foreign_usage=dict(reported.foreign_usage),
            # Allocatable host resources; a node that reports none is not limited by them.
            cpu_millicores=reported.cpu_millicores or None,
            memory_mib=reported.memory_mib or None,
            synced_at=now,
        )
        existing = known.get(reported.name)
        counts["updated" if existing else "added"] += 1
        if existing is None or any(
            getattr(existing, column) != getattr(wanted, column) for column in NODE_COLUMNS
        ):
            upserts.append(wanted)
        if problem:
            counts["held_back"] += 1
        if problem and (existing is None or problem != existing.held_back_reason):
            events.append((reported.name, "node.held_back", problem))
        if existing is None:
            events.append((reported.name, "node.discovered", ""))
        layouts_by_name[reported.name] = layouts
        splits_by_name[reported.name] = _split_counts(reported)
    # 3. Write what changed.
    Node.objects.bulk_create(
        upserts,
        batch_size=500,
        update_conflicts=True,
        unique_fields=["name"],
        update_fields=[*NODE_FIELDS, "synced_at"],
    )
    Node.objects.filter(name__in=seen).exclude(synced_at=now).update(synced_at=now)
    ids = dict(Node.objects.filter(name__in=seen).values_list("name", "pk"))
    devices: list[GpuDevice] = []
    beyond: dict[int, list[int]] = {}  # card count -> nodes that have cards past it
    for name, layouts in layouts_by_name.items():
        node_id = ids[name]
        have = cards.get(node_id, {})
        splits = splits_by_name[name]
        for index, (memory, layout) in enumerate(layouts):
            split = splits[index] if index < len(splits) else 0
            if have.get(index) != (memory, layout, split):
                devices.append(
                    GpuDevice(
                        node_id=node_id,
                        index=index,
                        memory_mib=memory,
                        mig_layout=layout,
                        vgpu_split_count=split,
                    )
                )
        if any(index >= len(layouts) for index in have):
            beyond.setdefault(len(layouts), []).append(node_id)
    GpuDevice.objects.bulk_create(
        devices,
        batch_size=1000,
        update_conflicts=True,
        unique_fields=["node", "index"],
        update_fields=["memory_mib", "mig_layout", "vgpu_split_count"],
    )
    for count, node_ids in beyond.items():
        GpuDevice.objects.filter(node_id__in=node_ids, index__gte=count).delete()
    lost = list(
        Node.objects.filter(is_schedulable=True, **_in(cluster, "pool__cluster")).exclude(
            name__in=seen
        )
    )
    audit = [
        record_audit_event(
            actor=None, action=action, target=Node(pk=ids[name]), message=message, commit=False
        )
        for name, action, message in events
    ]
    audit += [
        record_audit_event(
            actor=None,
            action="node.lost",
            target=node,
            message="Not reported by the cluster.",
            commit=False,
        )
        for node in lost
    ]
    AuditEvent.objects.bulk_create(audit, batch_size=1000)
    counts["lost"] = Node.objects.filter(pk__in=[n.pk for n in lost]).update(
        is_schedulable=False, synced_at=now
    )
    stamp_unschedulable_nodes(now=now)
    return counts


def _in(cluster: Cluster | None, lookup: str) -> dict[str, Cluster]:
    """A filter to `cluster`'s rows, or none (every cluster's) when it is None."""
    return {lookup: cluster} if cluster is not None else {}


def stamp_unschedulable_nodes(*, now: datetime) -> None:
    """Record when each node stopped taking work, and forget it once the node is back: the
    reclaim pass only gives up on work after a node stayed away for NODE_LOST_GRACE_SECONDS."""
    Node.objects.filter(is_schedulable=False, unschedulable_since__isnull=True).update(
        unschedulable_since=now
    )
    Node.objects.filter(is_schedulable=True, unschedulable_since__isnull=False).update(
        unschedulable_since=None
    )
