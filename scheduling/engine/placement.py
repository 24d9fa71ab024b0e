"""Placement: turn a shape into concrete device claims using the index, filters and scores.

Plugin placer, per request:

1. Resolve eligible groups (pool, model) with the pool filters and the model pin (cached per
   shape).
2. For every group, walk the capacity buckets in the pool's packing direction and keep the first
   `Policy.max_candidates` nodes/devices that pass the node filters and do not touch capacity
   reserved for a request this one would delay.  The bucket of fully free vGPU/MIG cards is
   walked node by node, fullest node first (`_by_node_use`).
3. Score the candidates with the weighted score plugins; highest wins, ties go to the lowest node
   id then device id (deterministic).

Every candidate must have the request's host CPU and memory free (`Placer.node_ok`), whatever
the policy's filter list says.  A whole-card request has all its cards on one node; only a
distributed one (`Request.distributed`) larger than a node is a gang, which takes the same
count of cards on each of as few nodes as hold it (`gang_layout`) from one group, all or
nothing, with its host resources free on each.
Multi-share requests (vGPU or MIG with gpu_count N > 1) take all N shares on one node, all or
nothing: N distinct GPUs with the vGPU memory and cores free each, or N MIG instances of the
profile (several may share one GPU); nodes come from the same device buckets as single shares.

`best_fit` is the comparison baseline: same buckets and filters, but it just takes the feasible
spot with the least free capacity left in the primary dimension (free cards on the node, free
memory on the GPU, free MIG slices, first legal MIG start), with no scoring.

`fgd` (fragmentation gradient descent, fgd.py) walks the same buckets but takes up to
`FGD_PER_BUCKET` spots from each bucket, `FGD_CANDIDATES` per group, so that spots of
different fullness compete; it picks the candidate whose node's expected fragmentation with
respect to the recent mix of request shapes grows least; candidates within `FGD_TIE` GE of
the best are ranked by the weighted score plugins, then node and device id.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator

from .fgd import FragmentationMeter, WorkloadMix, queue_mix, request_shape
from .filters import (
    NODE_FILTERS,
    POOL_FILTERS,
    NodeFilter,
    fit_shares,
    mig_start,
    whole_devices,
)
from .index import GIB, CapacityIndex, Group
from .scores import POOL_LEVEL, SCORES, ScoreFn
from .state import Claim, FleetState, Shape, gang_layout, is_gang
from .types import MIG_PROFILES, MIG_SLICES, Policy, Request

Candidate = tuple[int, tuple[Claim, ...], Group]
GroupKeyT = tuple[str, str]
ScoreList = list[tuple[ScoreFn, float]]
# (pool-level plugins, per-candidate plugins)
ScorePlan = tuple[ScoreList, ScoreList]

#: FGD candidates: spots scored per group, spots taken from one capacity bucket, and the
#: fragmentation difference (GE) under which two candidates count as equally good.
FGD_CANDIDATES = 12
FGD_PER_BUCKET = 2
FGD_TIE = 1e-6


class Placer:
    """Finds placements for shapes against the indexed fleet state."""

    def __init__(self, st: FleetState, index: CapacityIndex, policy: Policy) -> None:
        self.st = st
        self.index = index
        self.policy = policy
        unknown = [n for n in policy.filters if n not in NODE_FILTERS]
        if unknown:
            raise ValueError(f"unknown filter plugin(s): {', '.join(unknown)}")
        # The index only proposes spots with GPU capacity, so the capacity filter is implied
        # here; host resources are checked on every candidate by `node_ok` itself.
        self.node_filters: list[NodeFilter] = [
            NODE_FILTERS[n] for n in policy.filters if n not in ("capacity", "host_resources")
        ]
        self.scores = self._score_list(policy.scores)
        self.pool_scores: dict[str, ScorePlan] = {
            pool: self._score_list(lst) for pool, lst in policy.pool_scores
        }
        self._groups: dict[tuple[object, ...], tuple[list[Group], str | None]] = {}
        # Most shares of a shape a node of a group could hold (reasons.most_shares).
        self.most_cache: dict[tuple[object, ...], int] = {}
        # Host room of the nodes with room for a GPU shape, per group (reasons.gpu_room).
        self.room_cache: dict[tuple[Shape, GroupKeyT], tuple[int, list[tuple[int, int]]]] = {}
        self._node_sizes: dict[GroupKeyT, frozenset[int]] = {}
        self._queue: Iterable[Request] = ()
        self._meter: FragmentationMeter | None = None

    # ------------------------------------------------------------------ FGD workload mix

    def reset_mix(self, pending: Iterable[Request]) -> None:
        """A new cycle: the FGD mix is rebuilt from `pending` and the running work when needed."""
        self._queue = pending
        self._meter = None

    def meter(self) -> FragmentationMeter:
        """The fragmentation meter over the current mix (built on first use in a cycle)."""
        if self._meter is None:
            self._meter = FragmentationMeter(self.st, queue_mix(self.st, self._queue))
        return self._meter

    def note(self, request: Request) -> None:
        """A request decided on its own (`Scheduler.place_one`) joins the FGD mix."""
        if self.policy.placer != "fgd":
            return
        shape = request_shape(self.st, request)
        if shape is not None:
            self.meter().mix.add(shape)

    @property
    def mix(self) -> WorkloadMix:
        return self.meter().mix

    @staticmethod
    def _score_list(items: tuple[tuple[str, float], ...]) -> ScorePlan:
        """(pool-level plugins, per-candidate plugins), each with its weight, in policy order."""
        unknown = [n for n, _ in items if n not in SCORES]
        if unknown:
            raise ValueError(f"unknown score plugin(s): {', '.join(unknown)}")
        pool_level = [(SCORES[n], w) for n, w in items if w and n in POOL_LEVEL]
        per_cand = [(SCORES[n], w) for n, w in items if w and n not in POOL_LEVEL]
        return pool_level, per_cand

    # ------------------------------------------------------------------ groups

    def groups_for(self, shape: Shape) -> tuple[list[Group], str | None]:
        """Groups whose pool passes the pool filters and whose model the shape allows."""
        key = (shape.kind, shape.models, shape.workload_kind, shape.pools)
        hit = self._groups.get(key)
        if hit is not None:
            return hit
        groups: list[Group] = []
        reason: str | None = None
        for g in self.index.groups.values():
            why = next(
                (r for f in POOL_FILTERS.values() if (r := f(g.pool, shape)) is not None), None
            )
            if why is None and shape.models is not None and g.model not in shape.models:
                why = f"pool {g.pool.name} has {g.model}"
            if why is None:
                groups.append(g)
            elif reason is None:
                reason = why
        self._groups[key] = (groups, reason)
        return groups, reason

    def node_ok(self, node: int, shape: Shape) -> bool:
        """The node has the request's host resources free and all node filters (except the
        GPU capacity, which the index vouches for) pass."""
        st = self.st
        if not st.host_fits(node, shape.cpu_millicores, shape.host_memory_mib):
            return False
        return all(f(st, node, shape) is None for f in self.node_filters)

    # ------------------------------------------------------------------ plugin placer

    def place(
        self,
        shape: Shape,
        blocked: Collection[int],
        preemptible: bool,
        skip: Collection[str] = (),
    ) -> tuple[tuple[Claim, ...] | None, bool]:
        """Best placement now, and whether reserved capacity turned a candidate away.

        `skip` names pools the request may not use now (their short-request reserve).
        """
        groups, _ = self.groups_for(shape)
        if skip:
            groups = [g for g in groups if g.pool.name not in skip]
        if not groups:
            return None, False
        if self.policy.placer == "best_fit":
            return self._best_fit(shape, groups, blocked)
        if is_gang(shape, min(g.max_devices for g in groups)):
            return self._gang(shape, groups, blocked, preemptible)
        fgd = self.policy.placer == "fgd"
        limit = FGD_CANDIDATES if fgd else max(1, self.policy.max_candidates)
        per = FGD_PER_BUCKET if fgd else 0
        cands: list[Candidate] = []
        hit = False
        for g in groups:
            got: list[Candidate] = []
            if shape.kind == "whole":
                if shape.gpu_count <= g.max_devices:
                    hit |= self._whole_cands(g, shape, blocked, got, limit, per)
            elif shape.gpu_count > 1:
                hit |= self._share_cands(g, shape, blocked, got, limit, best=True)
            elif shape.kind == "vgpu":
                hit |= self._vgpu_cands(g, shape, blocked, got, limit, per)
            else:
                hit |= self._mig_cands(g, shape, blocked, got, limit, best=True, per_bucket=per)
            cands.extend(got)
        if not cands:
            return None, hit
        if len(cands) == 1:
            return cands[0][1], hit
        if fgd:
            cands = self._least_fragmenting(shape, cands)
            if len(cands) == 1:
                return cands[0][1], hit
        best: tuple[float, int, int] | None = None
        best_claims: tuple[Claim, ...] = ()
        base: dict[GroupKeyT, float] = {}
        for cand in cands:
            key = (-self._score(shape, cand, preemptible, base), cand[0], cand[1][0][0])
            if best is None or key < best:
                best, best_claims = key, cand[1]
        return best_claims, hit

    def _score(
        self, shape: Shape, cand: Candidate, preemptible: bool, base: dict[GroupKeyT, float]
    ) -> float:
        """Weighted plugin score of one candidate (`base` caches the pool-level part)."""
        st = self.st
        node, claims, g = cand
        pool_level, fns = self.pool_scores.get(g.pool.name, self.scores)
        total = base.get(g.key)
        if total is None:
            total = base[g.key] = sum(
                w * fn(st, node, shape, claims, g.pool, preemptible) for fn, w in pool_level
            )
        for fn, w in fns:
            total += w * fn(st, node, shape, claims, g.pool, preemptible)
        return total

    def _least_fragmenting(self, shape: Shape, cands: list[Candidate]) -> list[Candidate]:
        """The candidates whose placement raises the node's expected fragmentation least
        (within FGD_TIE GE of the best)."""
        meter = self.meter()
        if not meter.mix.classes():
            meter.mix.add(shape)  # nothing seen yet: the request's own shape
        before: dict[int, float] = {}
        deltas: list[float] = []
        for node, claims, _ in cands:
            b = before.get(node)
            if b is None:
                b = before[node] = meter.value(node)
            deltas.append(meter.value(node, claims, shape) - b)
        low = min(deltas)
        return [c for c, d in zip(cands, deltas, strict=True) if d <= low + FGD_TIE]

    def _whole_cands(
        self,
        g: Group,
        shape: Shape,
        blocked: Collection[int],
        out: list[Candidate],
        limit: int,
        per_bucket: int = 0,
    ) -> bool:
        """Nodes with `gpu_count` free cards, buckets in packing order (at most `per_bucket`
        from one bucket when set)."""
        st, n, hit = self.st, shape.gpu_count, False
        top = g.max_devices
        if g.pool.scoring == "binpack":
            ks: Iterable[int] = range(n, top + 1)
        else:
            ks = range(top, n - 1, -1)
        if not shape.allow_shared_node:
            # A node of its own: an entirely free node of any size that holds n GPUs, so only
            # the buckets of the group's node sizes (a k-GPU node is entirely free in bucket k).
            sizes = self._node_sizes.get(g.key)
            if sizes is None:
                sizes = frozenset(len(st.node_devices[x]) for x in g.nodes)
                self._node_sizes[g.key] = sizes
            ks = [k for k in ks if k in sizes]
        for k in ks:
            taken = 0
            for node in g.whole[k]:
                if not shape.allow_shared_node and len(st.node_devices[node]) != k:
                    continue
                if not self.node_ok(node, shape):
                    continue
                devs = whole_devices(st, node, n, blocked)
                if devs is None:
                    hit = True
                    continue
                out.append((node, tuple((d, True, 0, 0, 0) for d in devs), g))
                if len(out) >= limit:
                    return hit
                taken += 1
                if taken == per_bucket:
                    break
        return hit

    def _vgpu_cands(
        self,
        g: Group,
        shape: Shape,
        blocked: Collection[int],
        out: list[Candidate],
        limit: int,
        per_bucket: int = 0,
    ) -> bool:
        st, m, c, hit = self.st, shape.memory_mib, shape.cores_percent, False
        b0 = m // GIB
        if b0 >= len(g.vgpu):
            return False
        bs = (
            range(b0, len(g.vgpu))
            if g.pool.scoring == "binpack"
            else range(len(g.vgpu) - 1, b0 - 1, -1)
        )
        ok: dict[int, bool] = {}
        mem_free, cores_free, dev_node, buckets = st.mem_free, st.cores_free, st.dev_node, g.vgpu
        fresh = len(buckets) - 1 if g.pool.scoring == "binpack" else -1
        for b in bs:
            taken = 0
            for d in self._by_node_use(g, buckets[b]) if b == fresh else buckets[b]:
                if mem_free[d] < m or cores_free[d] < c:
                    continue
                node = dev_node[d]
                good = ok.get(node)
                if good is None:
                    good = ok[node] = self.node_ok(node, shape)
                if not good:
                    continue
                if d in blocked:
                    hit = True
                    continue
                out.append((node, ((d, False, m, c, 0),), g))
                if len(out) >= limit:
                    return hit
                taken += 1
                if taken == per_bucket:
                    break
        return hit

    def _mig_cands(
        self,
        g: Group,
        shape: Shape,
        blocked: Collection[int],
        out: list[Candidate],
        limit: int,
        best: bool,
        per_bucket: int = 0,
    ) -> bool:
        st, p, hit = self.st, shape.mig_profile, False
        if p is None or p not in MIG_PROFILES:
            return False
        need = MIG_PROFILES[p].slices
        buckets = g.mig[p]
        ss = (
            range(need, len(buckets))
            if g.pool.scoring == "binpack" or not best
            else range(len(buckets) - 1, need - 1, -1)
        )
        ok: dict[int, bool] = {}
        fresh = MIG_SLICES if g.pool.scoring == "binpack" else -1
        for s in ss:
            taken = 0
            for d in self._by_node_use(g, buckets[s]) if s == fresh else buckets[s]:
                node = st.dev_node[d]
                good = ok.get(node)
                if good is None:
                    good = ok[node] = self.node_ok(node, shape)
                if not good:
                    continue
                if d in blocked:
                    hit = True
                    continue
                start = mig_start(st, d, p, best=best)
                if start is None:
                    continue
                bits = ((1 << need) - 1) << start
                out.append((node, ((d, False, 0, 0, bits),), g))
                if len(out) >= limit:
                    return hit
                taken += 1
                if taken == per_bucket:
                    break
        return hit

    def _by_node_use(self, g: Group, bucket: dict[int, None]) -> Iterator[int]:
        """The devices of a bucket of fully free cards, one per node first, from the node with
        the fewest fully free cards; then the rest in bucket order.

        A share that has to break a fresh card thus breaks it where the node is already in use,
        and an empty node stays whole for the large shapes that need one (the bucket's own
        order is arbitrary). Devices of one node score alike, so one per node is enough to
        give the score plugins a choice.
        """
        node_devices = self.st.node_devices
        seen: set[int] = set()
        for by_free in g.whole[1:]:
            for node in by_free:
                dev = next((d for d in node_devices[node] if d in bucket), None)
                if dev is not None:
                    seen.add(dev)
                    yield dev
        yield from (d for d in bucket if d not in seen)

    def _share_cands(
        self,
        g: Group,
        shape: Shape,
        blocked: Collection[int],
        out: list[Candidate],
        limit: int,
        best: bool,
    ) -> bool:
        """Nodes that can hold all `gpu_count` vGPU shares / MIG instances of `shape` at once.

        Walks the same device buckets as single shares (in the pool's packing direction, or
        tightest first for best-fit); each node met there is tried once with `fit_shares`.
        """
        st, n, hit = self.st, shape.gpu_count, False
        if shape.kind == "vgpu":
            m, c = shape.memory_mib, shape.cores_percent
            b0 = m // GIB
            if b0 >= len(g.vgpu):
                return False
            buckets = g.vgpu
            lo = b0
        else:
            p = shape.mig_profile
            if p is None or p not in MIG_PROFILES:
                return False
            buckets = g.mig[p]
            lo = MIG_PROFILES[p].slices
            m = c = 0
        bs = (
            range(lo, len(buckets))
            if g.pool.scoring == "binpack" or not best
            else range(len(buckets) - 1, lo - 1, -1)
        )
        seen: set[int] = set()
        mem_free, cores_free, dev_node = st.mem_free, st.cores_free, st.dev_node
        vgpu = shape.kind == "vgpu"
        for b in bs:
            for d in buckets[b]:
                if vgpu and (mem_free[d] < m or cores_free[d] < c):
                    continue
                node = dev_node[d]
                if node in seen:
                    continue
                seen.add(node)
                if len(st.node_devices[node]) < n and vgpu:
                    continue
                if not self.node_ok(node, shape):
                    continue
                claims = fit_shares(st, node, shape, n, blocked, best)
                if claims is None:
                    if blocked and fit_shares(st, node, shape, n) is not None:
                        hit = True
                    continue
                out.append((node, claims, g))
                if len(out) >= limit:
                    return hit
        return hit

    def _gang(
        self, shape: Shape, groups: list[Group], blocked: Collection[int], preemptible: bool
    ) -> tuple[tuple[Claim, ...] | None, bool]:
        """All-or-nothing: the gang's layout (`gang_layout`: n nodes with the same count of
        cards each) from a single group, on the nodes whose free cards fit it most tightly
        (full nodes for a gang as wide as a node, so partly used nodes stay for others)."""
        st, hit = self.st, False
        order = groups
        if self.policy.placer != "best_fit":
            # Prefer the group the pool-level plugins like best (affinity, tier).
            def group_rank(g: Group) -> tuple[float, GroupKeyT]:
                pool_level = self.pool_scores.get(g.pool.name, self.scores)[0]
                value = sum(w * fn(st, -1, shape, (), g.pool, preemptible) for fn, w in pool_level)
                return (-value, g.key)

            order = sorted(groups, key=group_rank)
        for g in order:
            d_per = g.max_devices
            layout = gang_layout(shape.gpu_count, d_per)
            if layout is None:
                continue
            need, per = layout
            chosen: list[tuple[Claim, ...]] = []
            for k in range(per, d_per + 1):
                for node in g.whole[k]:
                    if len(chosen) == need:
                        break
                    if per == d_per and len(st.node_devices[node]) != d_per:
                        continue
                    if not self.node_ok(node, shape):
                        continue
                    devs = whole_devices(st, node, per, blocked)
                    if devs is None:
                        hit = True
                        continue
                    chosen.append(tuple((d, True, 0, 0, 0) for d in devs))
            if len(chosen) == need:
                return tuple(c for part in chosen for c in part), hit
        return None, hit

    # ------------------------------------------------------------------ best-fit baseline

    def _best_fit(
        self, shape: Shape, groups: list[Group], blocked: Collection[int]
    ) -> tuple[tuple[Claim, ...] | None, bool]:
        st, hit = self.st, False
        if shape.kind == "whole":
            if is_gang(shape, min(g.max_devices for g in groups)):
                return self._gang(shape, groups, blocked, False)
            top = max(g.max_devices for g in groups)
            for k in range(shape.gpu_count, top + 1):
                for g in groups:
                    if k > g.max_devices:
                        continue
                    for node in g.whole[k]:
                        if not shape.allow_shared_node and len(st.node_devices[node]) != k:
                            continue
                        if not self.node_ok(node, shape):
                            continue
                        devs = whole_devices(st, node, shape.gpu_count, blocked)
                        if devs is None:
                            hit = True
                            continue
                        return tuple((d, True, 0, 0, 0) for d in devs), hit
            return None, hit
        if shape.gpu_count > 1:
            # Multi-share: the first node (tightest bucket first, groups in order) that holds
            # all shares; within the node `fit_shares` already picks the tightest devices.
            got: list[Candidate] = []
            for g in groups:
                hit |= self._share_cands(g, shape, blocked, got, 1, best=False)
                if got:
                    return got[0][1], hit
            return None, hit
        if shape.kind == "vgpu":
            m, c = shape.memory_mib, shape.cores_percent
            top = max(len(g.vgpu) for g in groups)
            for b in range(m // GIB, top):
                best: tuple[int, int] | None = None
                for g in groups:
                    if b >= len(g.vgpu):
                        continue
                    for d in g.vgpu[b]:
                        if st.mem_free[d] < m or st.cores_free[d] < c:
                            continue
                        if not self.node_ok(st.dev_node[d], shape):
                            continue
                        if d in blocked:
                            hit = True
                            continue
                        if best is None or (st.mem_free[d], d) < best:
                            best = (st.mem_free[d], d)
                if best is not None:
                    return ((best[1], False, m, c, 0),), hit
            return None, hit
        got = []
        p = shape.mig_profile
        if p is None or p not in MIG_PROFILES:
            return None, False
        need = MIG_PROFILES[p].slices
        for s in range(need, 8):
            for g in groups:
                hit |= self._mig_cands_at(g, shape, blocked, got, s)
                if got:
                    return got[0][1], hit
        return None, hit

    def _mig_cands_at(
        self, g: Group, shape: Shape, blocked: Collection[int], out: list[Candidate], s: int
    ) -> bool:
        st, p, hit = self.st, shape.mig_profile, False
        assert p is not None
        for d in g.mig[p][s]:
            node = st.dev_node[d]
            if not self.node_ok(node, shape):
                continue
            if d in blocked:
                hit = True
                continue
            start = mig_start(st, d, p, best=False)
            if start is not None:
                bits = ((1 << MIG_PROFILES[p].slices) - 1) << start
                out.append((node, ((d, False, 0, 0, bits),), g))
                return hit
        return hit
