"""Filter plugins: small predicates that return None (passes) or a human-readable reason.

Two levels, run in this order (kube-scheduler's PreFilter/Filter split):

1. Pool filters `(pool, shape)` run once per (pool, shape) and prune whole pools: the pool
   admits the workload kind, and its sharing mode can serve the flavor kind.
2. Node filters `(state, node, shape)` run on each candidate node the capacity index proposes:
   schedulable, labels, taints, GPU model, shared/exclusive node, host resources (the pod's
   CPU and memory free on the node), and capacity (whole cards; N distinct devices with enough
   vGPU memory and cores each; N free MIG instances of the profile, on one GPU or several, for
   a request of gpu_count N).

Host resources are capacity too: `fit_node`, which every path that decides "fits" goes through
(placement, preemption, backfill), refuses a node without the CPU and memory, and the placer
checks them on every candidate whatever the policy's filter list says.

The fit helpers at the bottom choose concrete devices; placement, preemption and backfill all use
them so that "fits" means the same thing everywhere.

Adding a rule: write `def my_rule(st, node, shape) -> str | None`, register it in NODE_FILTERS
(or POOL_FILTERS), and list its name in `Policy.filters`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from .state import MODE_MIG, MODE_VGPU, Claim, FleetState, Shape, is_gang
from .types import MIG_PROFILES, MIG_SLICES, Pool, mig_bits

PoolFilter = Callable[[Pool, Shape], "str | None"]
NodeFilter = Callable[[FleetState, int, Shape], "str | None"]

_NO_BLOCK: frozenset[int] = frozenset()


# ----------------------------------------------------------------------------- pool filters


def pool_kind(pool: Pool, shape: Shape) -> str | None:
    """The pool accepts the request's workload kind (training, inference, ...)."""
    if shape.workload_kind in pool.allowed_kinds:
        return None
    return f"pool {pool.name} does not accept {shape.workload_kind} workloads"


def pool_sharing(pool: Pool, shape: Shape) -> str | None:
    """vGPU flavors need a vgpu pool and MIG flavors a mig pool; whole cards fit any pool."""
    if shape.kind == "whole" or shape.kind == pool.sharing:
        return None
    return f"pool {pool.name} is {pool.sharing}, not {shape.kind}"


def pool_candidate(pool: Pool, shape: Shape) -> str | None:
    """A request offered several pools (its flavor's, in one or more clusters) runs in one."""
    if not shape.pools or pool.name in shape.pools:
        return None
    return f"pool {pool.name} does not offer the request's flavor"


POOL_FILTERS: dict[str, PoolFilter] = {
    "pool_kind": pool_kind,
    "pool_sharing": pool_sharing,
    "pool_candidate": pool_candidate,
}


# ----------------------------------------------------------------------------- node filters


def node_schedulable(st: FleetState, node: int, shape: Shape) -> str | None:
    """Cordoned nodes take no new work."""
    return None if st.node_schedulable[node] else f"node {st.node_ids[node]} is cordoned"


def node_labels(st: FleetState, node: int, shape: Shape) -> str | None:
    """The node carries its pool's selector labels and the request's node selector."""
    labels = st.node_labels[node]
    pool = st.pools.get(st.node_pool[node])
    wanted = (pool.node_selector if pool else ()) + shape.node_selector
    for key, value in wanted:
        if labels.get(key) != value:
            return f"node {st.node_ids[node]} lacks label {key}={value}"
    return None


def node_taints(st: FleetState, node: int, shape: Shape) -> str | None:
    """Every NoSchedule/NoExecute taint not covered by the pool is tolerated by the request."""
    keys = st.node_taint_keys[node]
    if not keys:
        return None
    missing = sorted(k for k in keys if k not in shape.tolerations)
    return f"node {st.node_ids[node]} has untolerated taint {missing[0]}" if missing else None


def gpu_model(st: FleetState, node: int, shape: Shape) -> str | None:
    """The node's GPU model is one the flavor / pin allows."""
    if shape.models is None or st.node_model[node] in shape.models:
        return None
    return f"node {st.node_ids[node]} has {st.node_model[node]}, not {'/'.join(shape.models)}"


def shared_node(st: FleetState, node: int, shape: Shape) -> str | None:
    """No work joins a node held exclusively; an exclusive request needs an empty node."""
    if st.node_exclusive[node]:
        return f"node {st.node_ids[node]} is held exclusively"
    if not shape.allow_shared_node and st.node_tenants[node] > 0:
        return f"node {st.node_ids[node]} is shared and the request wants a node of its own"
    return None


def cpus_text(millicores: int) -> str:
    """Millicores as people read them (\"12 CPU\")."""
    return f"{millicores / 1000:g} CPU"


def gib_text(mib: int) -> str:
    """MiB as GiB (\"512 GiB\")."""
    return f"{mib / 1024:g} GiB"


def host_resources(st: FleetState, node: int, shape: Shape) -> str | None:
    """The node has the pod's CPU and memory free (what kube-scheduler's NodeResourcesFit
    checks; a pod placed without them stays Pending)."""
    if st.host_fits(node, shape.cpu_millicores, shape.host_memory_mib):
        return None
    return (
        f"node {st.node_ids[node]} has {cpus_text(max(0, st.node_cpu_free[node]))} and "
        f"{gib_text(max(0, st.node_mem_free[node]))} free, needs {cpus_text(shape.cpu_millicores)} "
        f"and {gib_text(shape.host_memory_mib)}"
    )


def capacity(st: FleetState, node: int, shape: Shape) -> str | None:
    """The node can host the request (or its per-node part, for gangs) right now."""
    n = shape.gpu_count
    part = min(n, len(st.node_devices[node])) if is_gang(shape, 0) else n
    if fit_node(st, node, shape, part) is not None:
        return None
    host = host_resources(st, node, shape)
    if host is not None:
        return host
    name = st.node_ids[node]
    if shape.kind == "whole":
        return f"node {name} has {st.free_whole_count(node)} free GPUs, needs {part}"
    if shape.kind == "vgpu":
        if n > 1:
            return (
                f"node {name} has fewer than {n} GPUs with {shape.memory_mib} MiB and "
                f"{shape.cores_percent}% cores free each"
            )
        return (
            f"node {name} has no GPU with {shape.memory_mib} MiB and "
            f"{shape.cores_percent}% cores free"
        )
    if n > 1:
        return f"node {name} has room for fewer than {n} {shape.mig_profile} MIG instances"
    return f"node {name} has no free {shape.mig_profile} MIG slice"


NODE_FILTERS: dict[str, NodeFilter] = {
    "node_schedulable": node_schedulable,
    "node_labels": node_labels,
    "node_taints": node_taints,
    "gpu_model": gpu_model,
    "shared_node": shared_node,
    "host_resources": host_resources,
    "capacity": capacity,
}


# ----------------------------------------------------------------------------- fit helpers


def whole_devices(
    st: FleetState, node: int, count: int, blocked: Collection[int] = _NO_BLOCK
) -> list[int] | None:
    """The `count` lowest-index fully free devices of `node` outside `blocked`, if enough."""
    out: list[int] = []
    for d in st.node_devices[node]:
        if st.fully_free(d) and d not in blocked:
            out.append(d)
            if len(out) == count:
                return out
    return None


def vgpu_fits(st: FleetState, dev: int, memory_mib: int, cores_percent: int) -> bool:
    """A vGPU-mode device not held whole has the memory and cores free, and room for one more
    share under its split count (HAMi refuses a share past it: the pod would wait)."""
    return (
        st.dev_mode[dev] == MODE_VGPU
        and not st.whole[dev]
        and st.mem_free[dev] >= memory_mib
        and st.cores_free[dev] >= cores_percent
        and st.share_room(dev)
    )


def _mig_value(mask: int) -> int:
    largest = 0
    for prof in MIG_PROFILES.values():
        if prof.slices > largest:
            for s in prof.starts:
                if not mask & mig_bits(prof.name, s):
                    largest = prof.slices
                    break
    return largest * 8 + (MIG_SLICES - bin(mask).count("1"))


_MASKS = range(1 << MIG_SLICES)
_MIG_VALUE: list[int] = [_mig_value(m) for m in _MASKS]


def _start_table(profile: str, best: bool) -> list[int]:
    out: list[int] = []
    for mask in _MASKS:
        chosen, chosen_value = -1, -1
        for s in MIG_PROFILES[profile].starts:
            bits = mig_bits(profile, s)
            if mask & bits:
                continue
            if not best:
                chosen = s
                break
            if _MIG_VALUE[mask | bits] > chosen_value:
                chosen, chosen_value = s, _MIG_VALUE[mask | bits]
        out.append(chosen)
    return out


# Precomputed per profile and occupied-slice mask: the start slice to use (-1: does not fit).
_BEST_START = {p: _start_table(p, True) for p in MIG_PROFILES}
_FIRST_START = {p: _start_table(p, False) for p in MIG_PROFILES}


_MIG_FITS: list[tuple[str, ...]] = [
    tuple(p for p in MIG_PROFILES if _FIRST_START[p][m] >= 0) for m in _MASKS
]


def mig_fits(mask: int) -> tuple[str, ...]:
    """Profiles that still fit somewhere on a MIG GPU whose used slices are `mask`."""
    return _MIG_FITS[mask]


def mig_value(mask: int) -> int:
    """How useful the free slices of a MIG GPU are: largest placeable profile first, then 1g count.

    Used to prefer placements that keep a large aligned block free (fragmentation awareness).
    """
    return _MIG_VALUE[mask]


def _start_on(st: FleetState, dev: int, profile: str, mask: int, best: bool) -> int:
    """Start slice for a `profile` instance on `dev` whose used slices are `mask` (-1: none).

    A card with a fixed layout offers only its instances of that profile, the first free one;
    any other card uses the precomputed tables.
    """
    layout = st.mig_layout[dev]
    if layout is None:
        return (_BEST_START if best else _FIRST_START)[profile][mask]
    size = (1 << MIG_PROFILES[profile].slices) - 1
    for s in layout.get(profile, ()):
        if not mask & (size << s):
            return s
    return -1


def mig_fits_on(st: FleetState, dev: int) -> tuple[str, ...]:
    """Profiles that still fit somewhere on MIG device `dev` (its layout, if it has one)."""
    if st.mig_layout[dev] is None:
        return _MIG_FITS[st.mig_mask[dev]]
    mask = st.mig_mask[dev]
    return tuple(p for p in MIG_PROFILES if _start_on(st, dev, p, mask, False) >= 0)


def mig_start(st: FleetState, dev: int, profile: str, best: bool = True) -> int | None:
    """Start slice for a `profile` instance on `dev`, or None.

    With `best`, the start that leaves the most useful free block (see `mig_value`), lowest start
    on ties; otherwise the first legal start (what a naive placer does). A card with a fixed
    layout only offers the instances of its layout.
    """
    if st.dev_mode[dev] != MODE_MIG or st.whole[dev]:
        return None
    s = _start_on(st, dev, profile, st.mig_mask[dev], best)
    return None if s < 0 else s


def fit_node(
    st: FleetState,
    node: int,
    shape: Shape,
    count: int,
    blocked: Collection[int] = _NO_BLOCK,
) -> tuple[Claim, ...] | None:
    """Claims placing `count` devices of `shape` on `node` now, ignoring other filters.

    None when the node lacks the pod's host CPU or memory.  Whole: the lowest free cards.
    vGPU: the tightest device by free memory (best fit); for `count` > 1 the `count` tightest
    distinct devices (HAMi puts each share on its own GPU).
    MIG: the device with the fewest free slices, at the fragmentation-aware start; for
    `count` > 1 that choice repeated instance by instance (several may share one GPU).
    """
    if not st.host_fits(node, shape.cpu_millicores, shape.host_memory_mib):
        return None
    return fit_gpus(st, node, shape, count, blocked)


def fit_gpus(
    st: FleetState,
    node: int,
    shape: Shape,
    count: int,
    blocked: Collection[int] = _NO_BLOCK,
) -> tuple[Claim, ...] | None:
    """`fit_node` for the GPUs alone (host resources not checked): for reasons only."""
    if shape.kind == "whole":
        if not shape.allow_shared_node and st.node_tenants[node] > 0:
            return None
        devs = whole_devices(st, node, count, blocked)
        return None if devs is None else tuple((d, True, 0, 0, 0) for d in devs)
    if count > 1:
        return fit_shares(st, node, shape, count, blocked)
    best_dev = -1
    best_key = 1 << 60
    best_bits = 0
    for d in st.node_devices[node]:
        if d in blocked:
            continue
        if shape.kind == "vgpu":
            if vgpu_fits(st, d, shape.memory_mib, shape.cores_percent) and (
                st.mem_free[d] < best_key
            ):
                best_dev, best_key = d, st.mem_free[d]
        elif shape.mig_profile is not None and st.dev_mode[d] == MODE_MIG:
            s = mig_start(st, d, shape.mig_profile)
            if s is not None and st.mig_free_slices(d) < best_key:
                best_dev, best_key = d, st.mig_free_slices(d)
                best_bits = mig_bits(shape.mig_profile, s)
    if best_dev < 0:
        return None
    if shape.kind == "vgpu":
        return ((best_dev, False, shape.memory_mib, shape.cores_percent, 0),)
    return ((best_dev, False, 0, 0, best_bits),)


def fit_shares(
    st: FleetState,
    node: int,
    shape: Shape,
    count: int,
    blocked: Collection[int] = _NO_BLOCK,
    best: bool = True,
) -> tuple[Claim, ...] | None:
    """`count` vGPU shares on distinct devices, or `count` MIG instances, of `node` (or None).

    vGPU: the `count` devices with the least free memory that fit (then device id).  MIG: each
    instance in turn on the device with the fewest free slices that still fits it (then device
    id), at the fragmentation-aware start (`best`; else the first legal start), counting the
    instances already chosen.  Claims come sorted by device, then start.
    """
    if shape.kind == "vgpu":
        m, c = shape.memory_mib, shape.cores_percent
        fits = [
            (st.mem_free[d], d)
            for d in st.node_devices[node]
            if d not in blocked and vgpu_fits(st, d, m, c)
        ]
        if len(fits) < count:
            return None
        fits.sort()
        return tuple((d, False, m, c, 0) for _, d in fits[:count])
    p = shape.mig_profile
    if p is None or p not in MIG_PROFILES:
        return None
    need = MIG_PROFILES[p].slices
    masks = {
        d: st.mig_mask[d]
        for d in st.node_devices[node]
        if d not in blocked and st.dev_mode[d] == MODE_MIG and not st.whole[d]
    }
    out: list[Claim] = []
    for _ in range(count):
        best_dev, best_key, best_start = -1, MIG_SLICES + 1, -1
        for d, mask in masks.items():
            s = _start_on(st, d, p, mask, best)
            if s >= 0:
                free = MIG_SLICES - bin(mask).count("1")
                if free < best_key:
                    best_dev, best_key, best_start = d, free, s
        if best_dev < 0:
            return None
        bits = ((1 << need) - 1) << best_start
        masks[best_dev] |= bits
        out.append((best_dev, False, 0, 0, bits))
    out.sort(key=lambda c: (c[0], c[4]))
    return tuple(out)


def max_shares(st: FleetState, node: int, shape: Shape) -> int:
    """How many shares of `shape` `node` could ever hold (every device empty)."""
    if shape.kind == "vgpu":
        return sum(
            1
            for d in st.node_devices[node]
            if st.dev_mode[d] == MODE_VGPU
            and st.mem_total[d] >= shape.memory_mib
            and shape.cores_percent <= 100
        )
    if shape.kind == "mig" and shape.mig_profile in MIG_PROFILES:
        # A profile's starts never overlap, nor do a layout's instances.
        return sum(
            len(st.mig_starts_of(d, shape.mig_profile))
            for d in st.node_devices[node]
            if st.dev_mode[d] == MODE_MIG
        )
    return len(st.node_devices[node])
