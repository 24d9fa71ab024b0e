"""Figures about a plan that the benchmark computes on its own, not with the engine's helpers.

* `stranded`: free GPU-equivalents after a plan, per pool, that no request still waiting in
  that pool could use: no waiting request of the pool fits the node they are on (pool, GPU
  model, labels, taints, shared/exclusive node, and the request's whole shape: N whole cards,
  N vGPU shares on distinct cards, N MIG instances), within quota now: its team could take it
  under its guarantee, or under its limit with idle guaranteed quota left in its cohort (the
  engine's quota rules).
  A request the plan does not admit counts as waiting, whether or not the plan lists it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from scheduling.engine.types import MIG_PROFILES, MIG_SLICES, Plan, Request, Snapshot, mig_bits

EPS = 1e-9


@dataclass(slots=True)
class _Dev:
    node: str
    total: int
    mem_free: int
    cores_free: int
    mig_mask: int
    whole: bool
    mig_capable: bool

    def fully_free(self) -> bool:
        return (
            not self.whole
            and self.mig_mask == 0
            and self.mem_free == self.total
            and self.cores_free == 100
        )


@dataclass(frozen=True, slots=True)
class PoolFigures:
    capacity_ge: float
    free_ge: float
    stranded_ge: float
    admitted_ge: float


def _state_after(
    snap: Snapshot, plan: Plan
) -> tuple[dict[tuple[str, int], _Dev], dict[str, int], set[str]]:
    """Devices after the plan, allocations per node, nodes held exclusively."""
    devs = {
        (d.node_id, d.index): _Dev(
            d.node_id,
            d.memory_total_mib,
            d.memory_free_mib,
            d.cores_free_percent,
            d.mig_used_mask,
            d.whole_allocated,
            d.mig_capable,
        )
        for d in snap.devices
    }
    victims = {p.victim_id for p in plan.preemptions}
    tenants: dict[str, int] = defaultdict(int)
    exclusive: set[str] = set()

    def claim(
        node: str,
        idx: int,
        whole: bool,
        mem: int,
        cores: int,
        prof: str | None,
        start: int | None,
        sign: int,
    ) -> None:
        d = devs[(node, idx)]
        if prof is not None and start is not None:
            bits = mig_bits(prof, start)
            d.mig_mask = d.mig_mask | bits if sign > 0 else d.mig_mask & ~bits
        elif whole:
            d.whole = sign > 0
        else:
            d.mem_free -= sign * mem
            d.cores_free -= sign * cores

    for a in snap.allocations:
        nodes = {c.node_id for c in a.placement}
        if a.request_id in victims:
            for c in a.placement:
                claim(
                    c.node_id,
                    c.device_index,
                    c.whole,
                    c.memory_mib,
                    c.cores_percent,
                    c.mig_profile,
                    c.mig_start,
                    -1,
                )
            continue
        for n in nodes:
            tenants[n] += 1
            if a.exclusive_node:
                exclusive.add(n)
    reqs = {r.id: r for r in snap.pending}
    for adm in plan.admissions:
        for c in adm.placement:
            claim(
                c.node_id,
                c.device_index,
                c.whole,
                c.memory_mib,
                c.cores_percent,
                c.mig_profile,
                c.mig_start,
                +1,
            )
        for n in adm.node_ids:
            tenants[n] += 1
            if not reqs[adm.request_id].allow_shared_node:
                exclusive.add(n)
    return devs, tenants, exclusive


def _free_ge(d: _Dev, sharing: str) -> float:
    """The engine's free-GE definition: cards, usable vGPU share, free MIG slices."""
    if d.whole:
        return 0.0
    if sharing == "mig" or d.mig_capable:
        return (MIG_SLICES - bin(d.mig_mask).count("1")) / MIG_SLICES
    if sharing == "vgpu":
        return min(d.mem_free / max(1, d.total), d.cores_free / 100)
    return 1.0 if d.fully_free() else 0.0


def _mig_instances(mask: int, profile: str) -> int:
    """How many instances of `profile` fit in a free-slice mask (greedy, first legal start)."""
    prof = MIG_PROFILES[profile]
    n = 0
    for s in prof.starts:
        bits = ((1 << prof.slices) - 1) << s
        if not mask & bits:
            mask |= bits
            n += 1
    return n


_Shape = tuple[
    str,
    int,
    int,
    int,
    str | None,
    bool,
    str | None,
    tuple[tuple[str, str], ...],
    tuple[str, ...],
    str,
    tuple[str, ...],
]


def _usable_devices(devs: list[tuple[int, _Dev]], shape: _Shape) -> set[int]:
    """Devices of one node (index, state) that a request of `shape` could use now."""
    kind, count, mem, cores, profile, _shared, _, _, _, _, _ = shape
    if kind == "whole":
        free = {i for i, d in devs if d.fully_free()}
        return free if len(free) >= min(count, len(devs)) else set()
    if kind == "vgpu":
        fit = {
            i
            for i, d in devs
            if not d.whole and d.mig_mask == 0 and d.mem_free >= mem and d.cores_free >= cores
        }
        return fit if len(fit) >= count else set()
    if profile is None or profile not in MIG_PROFILES:
        return set()
    per = {i: _mig_instances(d.mig_mask, profile) for i, d in devs if d.mig_capable and not d.whole}
    return {i for i, n in per.items() if n} if sum(per.values()) >= count else set()


def stranded(
    snap: Snapshot, plan: Plan, usage_after: dict[tuple[str, str], float]
) -> dict[str, PoolFigures]:
    """Per pool: capacity, free GE after the plan, stranded GE, admitted GE."""
    pools = {p.name: p for p in snap.pools}
    flavors = {f.id: f for f in snap.flavors}
    devs, tenants, exclusive = _state_after(snap, plan)
    by_node: dict[str, list[tuple[int, _Dev]]] = defaultdict(list)
    for (node, idx), d in sorted(devs.items()):
        by_node[node].append((idx, d))
    nodes = {n.id: n for n in snap.nodes}

    # Quota the waiting requests could take now (the engine's rules, recomputed here).
    guaranteed: dict[tuple[str, str], float] = {}
    limit: dict[tuple[str, str], float] = {}
    cohort_of = {t.name: t.cohort for t in snap.teams}
    cohort_g: dict[tuple[str | None, str], float] = defaultdict(float)
    cohort_u: dict[tuple[str | None, str], float] = defaultdict(float)
    for q in snap.quotas:
        if q.project is None:
            guaranteed[(q.team, q.flavor)] = q.guaranteed
            limit[(q.team, q.flavor)] = max(q.limit, q.guaranteed)
            cohort_g[(cohort_of.get(q.team), q.flavor)] += q.guaranteed
    for (team, flavor), used in usage_after.items():
        cohort_u[(cohort_of.get(team), flavor)] += used

    def within_quota(r: Request) -> bool:
        key = (r.team, r.flavor)
        demand = r.gpu_count * flavors[r.flavor].gpu_equivalent
        used = usage_after.get(key, 0.0)
        if key not in limit:
            return False
        if used + demand <= guaranteed[key] + EPS:
            return True
        cohort = cohort_of.get(r.team)
        return (
            used + demand <= limit[key] + EPS
            and cohort is not None
            and cohort_u[(cohort, r.flavor)] + demand <= cohort_g[(cohort, r.flavor)] + EPS
        )

    admitted = {a.request_id for a in plan.admissions}  # every other request still waits
    waiting = {r.id for r in snap.pending if r.id not in admitted}
    shapes: set[_Shape] = set()
    for r in snap.pending:
        if r.id not in waiting or not within_quota(r):
            continue
        f = flavors[r.flavor]
        model = r.pinned_model or f.gpu_model
        shape: _Shape = (
            f.kind,
            r.gpu_count,
            r.vgpu_memory_mib or f.memory_mib,
            r.vgpu_cores_percent or f.cores_percent,
            r.mig_profile or f.mig_profile,
            r.allow_shared_node,
            model,
            tuple(sorted(r.node_selector)),
            tuple(sorted(set(r.tolerations))),
            r.kind,
            tuple(sorted(r.pools)),
        )
        shapes.add(shape)

    def node_ok(node: str, shape: _Shape) -> bool:
        n = nodes[node]
        pool = pools.get(n.pool)
        kind, _, _, _, _, shared, model, selector, tolerations, wkind, candidates = shape
        if pool is None or not n.schedulable or node in exclusive:
            return False
        if candidates and n.pool not in candidates:
            return False
        if wkind not in pool.allowed_kinds:
            return False
        if kind != "whole" and kind != pool.sharing:
            return False
        if model is not None and n.gpu_model != model:
            return False
        labels = dict(n.labels)
        if any(labels.get(k) != v for k, v in pool.node_selector + selector):
            return False
        pool_taints = {t.key for t in pool.taints}
        for t in n.taints:
            if (
                t.effect != "PreferNoSchedule"
                and t.key not in pool_taints
                and t.key not in tolerations
            ):
                return False
        return shared or tenants.get(node, 0) == 0

    out: dict[str, PoolFigures] = {}
    per_pool: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for node, node_devs in by_node.items():
        pool_name = nodes[node].pool
        sharing = pools[pool_name].sharing if pool_name in pools else "exclusive"
        acc = per_pool[pool_name]
        acc[0] += len(node_devs)
        if node in exclusive or not nodes[node].schedulable:
            continue
        free = {i: _free_ge(d, sharing) for i, d in node_devs}
        acc[1] += sum(free.values())
        if not any(free.values()):
            continue
        usable: set[int] = set()
        for shape in shapes:
            if node_ok(node, shape):
                usable |= _usable_devices(node_devs, shape)
                if len(usable) == len(node_devs):
                    break
        acc[2] += sum(v for i, v in free.items() if i not in usable)
    reqs = {r.id: r for r in snap.pending}
    for adm in plan.admissions:
        r = reqs[adm.request_id]
        pool_name = nodes[adm.node_ids[0]].pool
        per_pool[pool_name][3] += r.gpu_count * flavors[r.flavor].gpu_equivalent
    for name in sorted(per_pool):
        out[name] = PoolFigures(*per_pool[name])
    return out


def total(figures: Iterable[PoolFigures], attr: str) -> float:
    return sum(getattr(f, attr) for f in figures)
