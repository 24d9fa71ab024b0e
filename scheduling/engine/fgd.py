"""Fragmentation-aware placement: Fragmentation Gradient Descent (FGD, Weng et al., USENIX ATC'23).

The fragmentation of a node with respect to a task shape is the node's free GPU capacity (GE)
that a task of that shape could not use: all of it when the task cannot run on the node at all
(wrong pool, sharing mode, GPU model, labels or taints, too little host CPU or memory, the node
held by a request that wants it alone, too few usable cards or shares), otherwise the free GE
of the cards the task could not use (partly used cards for whole-card work, cards with too
little memory or cores for a vGPU share, free MIG slices no legal instance of the profile can
cover). The node's fragmentation with respect to the workload is the expectation over the
recent mix of request shapes, each weighted by the GE it asked for (how often it came times
its GE: an 8-card job weighs as much as 32 quarter shares, so the capacity that large work
needs is what the measure keeps whole). FGD places a request where that expected
fragmentation grows least (or falls most).

The mix (`WorkloadMix`, see `queue_mix`): the shapes of every request in the cycle's queue,
of the newest `RECENT_ALLOCATIONS` running allocations (by start time, then id), and of every
request decided one at a time (`Scheduler.place_one`) since; the `MIX_CLASSES` heaviest
shapes are kept, their weights normalised over them.

Pure and deterministic: ties between shapes of equal count are broken by the shape's text.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import replace

from .filters import node_labels, node_taints, pool_candidate, pool_sharing
from .state import MODE_MIG, MODE_VGPU, AllocRecord, Claim, FleetState, Shape, shape_of
from .types import MIG_PROFILES, MIG_SLICES, Request

#: Shapes of the mix kept (the most frequent); the rest of the tail is left out.
MIX_CLASSES = 12
#: Newest running allocations whose shapes join the mix.
RECENT_ALLOCATIONS = 1_000

_MASKS = range(1 << MIG_SLICES)
_FULL = (1 << MIG_SLICES) - 1


def _cover(starts: tuple[int, ...], slices: int, mask: int) -> tuple[int, int]:
    """(instances that fit, free slices they cover) for a profile of `slices` at `starts`.

    A profile's legal starts never overlap, nor do a layout's instances, so the instances
    that fit are the free starts.
    """
    n = covered = 0
    size = (1 << slices) - 1
    for s in starts:
        bits = size << s
        if s + slices <= MIG_SLICES and not mask & bits:
            n += 1
            covered |= bits
    return n, bin(covered).count("1")


#: Per profile and used-slice mask of a card without a fixed layout: (instances, covered slices).
_COVER: dict[str, list[tuple[int, int]]] = {
    p.name: [_cover(p.starts, p.slices, m) for m in _MASKS] for p in MIG_PROFILES.values()
}


class WorkloadMix:
    """Request shapes and how often each came; `classes()` gives the normalised top shapes."""

    def __init__(self) -> None:
        self.counts: Counter[Shape] = Counter()
        self.version = 0
        self._classes: tuple[tuple[Shape, float], ...] | None = None

    def add(self, shape: Shape, count: int = 1) -> None:
        self.counts[shape] += count
        self.version += 1
        self._classes = None

    def classes(self) -> tuple[tuple[Shape, float], ...]:
        """The `MIX_CLASSES` heaviest shapes (count x GE) with weights summing to 1 (or none)."""
        if self._classes is None:
            weighted = [(s, c * shape_ge(s)) for s, c in self.counts.items()]
            ranked = sorted(weighted, key=lambda kv: (-kv[1], repr(kv[0])))
            top = ranked[:MIX_CLASSES]
            total = sum(c for _, c in top)
            self._classes = tuple((s, c / total) for s, c in top) if total else ()
        return self._classes


def shape_ge(shape: Shape) -> float:
    """GPU-equivalents one request of `shape` asks for (a vGPU share by its cores)."""
    if shape.kind == "whole":
        return float(shape.gpu_count)
    if shape.kind == "vgpu":
        return shape.gpu_count * max(1, shape.cores_percent) / 100
    prof = MIG_PROFILES.get(shape.mig_profile or "")
    return shape.gpu_count * (prof.slices / MIG_SLICES if prof else 1 / MIG_SLICES)


def allocation_shape(st: FleetState, rec: AllocRecord) -> Shape | None:
    """The shape of running work as the mix counts it: flavor kind and model, the per-card
    share or MIG profile of its claims, its card count and host resources (any workload kind,
    any pool of its sharing mode)."""
    flavor = st.flavors.get(rec.flavor)
    if flavor is None or not rec.claims:
        return None
    _, _, mem, cores, bits = rec.claims[0]
    profile = None
    if flavor.kind == "mig":
        size = bin(bits).count("1")
        profile = next((p.name for p in MIG_PROFILES.values() if p.slices == size), None)
        if profile is None:
            return None
    return Shape(
        kind=flavor.kind,
        gpu_count=len(rec.claims) if flavor.kind != "whole" else len(rec.claims) // len(rec.nodes),
        memory_mib=mem,
        cores_percent=cores,
        mig_profile=profile,
        models=(flavor.gpu_model,) if flavor.gpu_model is not None else None,
        workload_kind="",
        allow_shared_node=not rec.exclusive_node,
        node_selector=(),
        tolerations=(),
        cpu_millicores=rec.cpu_millicores,
        host_memory_mib=rec.memory_mib,
    )


def request_shape(st: FleetState, request: Request) -> Shape | None:
    """A request's shape as the mix counts it (None for an unknown flavor)."""
    flavor = st.flavors.get(request.flavor)
    if flavor is None or request.gpu_count < 1:
        return None
    return replace(shape_of(request, flavor), distributed=False)


def queue_mix(st: FleetState, pending: Iterable[Request]) -> WorkloadMix:
    """The mix a cycle starts from: its queue plus the newest running allocations."""
    mix = WorkloadMix()
    raw: Counter[tuple[object, ...]] = Counter()
    first: dict[tuple[object, ...], Request] = {}
    for r in pending:
        key: tuple[object, ...] = (
            r.flavor, r.gpu_count, r.kind, r.allow_shared_node, r.pinned_model,
            r.vgpu_memory_mib, r.vgpu_cores_percent, r.mig_profile, r.node_selector,
            r.tolerations, r.pools, r.cpu_millicores, r.memory_mib,
        )  # fmt: skip
        raw[key] += 1
        first.setdefault(key, r)
    for key, count in raw.items():
        shape = request_shape(st, first[key])
        if shape is not None:
            mix.add(shape, count)
    recent = sorted(st.allocs.values(), key=lambda a: (-a.started_at, a.id))[:RECENT_ALLOCATIONS]
    for rec in recent:
        shape = allocation_shape(st, rec)
        if shape is not None:
            mix.add(shape)
    return mix


class FragmentationMeter:
    """Expected fragmentation of a node with respect to a mix, before or after a placement."""

    def __init__(self, st: FleetState, mix: WorkloadMix) -> None:
        self.st = st
        self.mix = mix
        self._eligible: dict[tuple[Shape, int], bool] = {}

    def eligible(self, shape: Shape, node: int) -> bool:
        """Whether a task of `shape` may ever run on `node` (pool, sharing, model, labels,
        taints, schedulable); capacity and host resources are judged per state."""
        key = (shape, node)
        hit = self._eligible.get(key)
        if hit is None:
            st = self.st
            pool = st.pools.get(st.node_pool[node])
            hit = (
                pool is not None
                and st.node_schedulable[node]
                and pool_sharing(pool, shape) is None
                and pool_candidate(pool, shape) is None
                and (not shape.workload_kind or shape.workload_kind in pool.allowed_kinds)
                and (shape.models is None or st.node_model[node] in shape.models)
                and node_labels(st, node, shape) is None
                and node_taints(st, node, shape) is None
            )
            self._eligible[key] = hit
        return hit

    def value(
        self, node: int, claims: tuple[Claim, ...] = (), placed: Shape | None = None
    ) -> float:
        """Expected fragmentation (GE) of `node` now, or after `claims` of `placed` land on it."""
        st = self.st
        devs = st.node_devices[node]
        mem = [st.mem_free[d] for d in devs]
        cores = [st.cores_free[d] for d in devs]
        masks = [st.mig_mask[d] for d in devs]
        whole = [st.whole[d] for d in devs]
        cpu, host_mem = st.node_cpu_free[node], st.node_mem_free[node]
        tenants, exclusive = st.node_tenants[node], st.node_exclusive[node]
        if claims:
            pos = {d: i for i, d in enumerate(devs)}
            for dev, is_whole, m, c, bits in claims:
                i = pos.get(dev)
                if i is None:
                    continue
                if is_whole:
                    whole[i] = True
                else:
                    mem[i] -= m
                    cores[i] -= c
                    masks[i] |= bits
            if placed is not None:
                cpu -= placed.cpu_millicores
                host_mem -= placed.host_memory_mib
                exclusive = exclusive or not placed.allow_shared_node
            tenants += 1
        free: list[float] = []
        full = 0
        for i, d in enumerate(devs):
            mode = st.dev_mode[d]
            if whole[i]:
                free.append(0.0)
                continue
            fully = masks[i] == 0 and mem[i] == st.mem_total[d] and cores[i] == 100
            full += fully
            if mode == MODE_MIG:
                free.append((MIG_SLICES - bin(masks[i]).count("1")) / MIG_SLICES)
            elif mode == MODE_VGPU:
                free.append(min(mem[i] / max(1, st.mem_total[d]), cores[i] / 100))
            else:
                free.append(1.0 if fully else 0.0)
        total = sum(free)
        if total <= 0.0:
            return 0.0
        if exclusive or not st.node_schedulable[node]:
            return total
        out = 0.0
        for shape, weight in self.mix.classes():
            if (
                not self.eligible(shape, node)
                or cpu < shape.cpu_millicores
                or host_mem < shape.host_memory_mib
            ):
                out += weight * total
                continue
            n = shape.gpu_count
            if shape.kind == "whole":
                if full < n or (not shape.allow_shared_node and tenants > 0):
                    out += weight * total
                else:
                    out += weight * (total - full)
            elif shape.kind == "vgpu":
                m, c = shape.memory_mib, shape.cores_percent
                usable = used = 0.0
                for i, d in enumerate(devs):
                    if (
                        st.dev_mode[d] == MODE_VGPU
                        and not whole[i]
                        and mem[i] >= m
                        and cores[i] >= c
                    ):
                        usable += free[i]
                        used += 1
                out += weight * (total if used < n else total - usable)
            else:
                p = shape.mig_profile
                if p is None or p not in MIG_PROFILES:
                    out += weight * total
                    continue
                slices = MIG_PROFILES[p].slices
                inst = covered = 0
                for i, d in enumerate(devs):
                    if st.dev_mode[d] != MODE_MIG or whole[i]:
                        continue
                    layout = st.mig_layout[d]
                    if layout is None:
                        k, cov = _COVER[p][masks[i] & _FULL]
                    else:
                        k, cov = _cover(layout.get(p, ()), slices, masks[i])
                    inst += k
                    covered += cov
                out += weight * (total if inst < n else total - covered / MIG_SLICES)
        return out
