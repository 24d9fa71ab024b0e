"""Mutable, array-backed view of the fleet that one planning cycle works on.

The snapshot's frozen values are flattened into parallel lists indexed by integer node and
device ids (sorted by the snapshot's string ids, so input order never matters).  Applying or
releasing an allocation updates those lists and tells a listener (the capacity index) which
nodes changed, so indexes stay current without rescans.

`Shape` is the part of a request that decides where it can go; requests with equal shapes are
interchangeable for placement, which is what the failure memo keys on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .types import (
    MIG_PROFILES,
    MIG_SLICES,
    Allocation,
    DeviceClaim,
    Flavor,
    FlavorKind,
    Pool,
    Request,
    Snapshot,
    mig_layout_starts,
)

FULL_MIG_MASK = (1 << MIG_SLICES) - 1
MODE_EXCLUSIVE, MODE_VGPU, MODE_MIG = 0, 1, 2
_MODES = {"exclusive": MODE_EXCLUSIVE, "vgpu": MODE_VGPU, "mig": MODE_MIG}


@dataclass(frozen=True, slots=True)
class Shape:
    """Placement-relevant part of a request (hashable; equal shapes place identically)."""

    kind: FlavorKind
    gpu_count: int
    memory_mib: int
    cores_percent: int
    mig_profile: str | None
    models: tuple[str, ...] | None
    workload_kind: str
    allow_shared_node: bool
    node_selector: tuple[tuple[str, str], ...]
    tolerations: tuple[str, ...]
    pools: tuple[str, ...] = ()
    # Host resources of one pod (per node), and whether the request may be a multi-node gang.
    cpu_millicores: int = 0
    host_memory_mib: int = 0
    distributed: bool = False


def is_gang(shape: Shape, max_devices: int) -> bool:
    """A whole-card request spread over several nodes: it says it is distributed and asks for
    more cards than the largest node of the smallest eligible group has (`max_devices`).

    Everything else has all its cards on one node.
    """
    return shape.distributed and shape.kind == "whole" and shape.gpu_count > max_devices


def gang_layout(gpu_count: int, max_devices: int) -> tuple[int, int] | None:
    """How a gang of `gpu_count` cards spreads over nodes of at most `max_devices` cards: as
    (nodes, cards per node), the same count on every node, on as few nodes as hold it
    (ceil(gpu_count / max_devices)): 16 on 8-card nodes is 2 x 8, 12 is 2 x 6, 9 on 4-card
    nodes 3 x 3. None when that many nodes cannot hold an equal share (7 on 4-card nodes):
    every rank of a gang is one pod of one template, with one card count."""
    if max_devices < 1 or gpu_count < 1:
        return None
    nodes = -(-gpu_count // max_devices)
    if gpu_count % nodes:
        return None
    return nodes, gpu_count // nodes


def shape_fields(request: Request) -> tuple[object, ...]:
    """The fields of `request` that its shape is made of (with its flavor's): requests equal
    in them have one shape, without building it."""
    return (
        request.flavor,
        request.gpu_count,
        request.kind,
        request.allow_shared_node,
        request.pinned_model,
        request.vgpu_memory_mib,
        request.vgpu_cores_percent,
        request.mig_profile,
        request.node_selector,
        request.tolerations,
        request.pools,
        request.cpu_millicores,
        request.memory_mib,
        request.distributed,
    )


def shape_of(request: Request, flavor: Flavor) -> Shape:
    """Resolve a request against its flavor (request fields override flavor defaults)."""
    models: tuple[str, ...] | None = None
    if flavor.gpu_model is not None:
        models = (flavor.gpu_model,)
    if request.pinned_model is not None:
        models = (request.pinned_model,) if models is None or request.pinned_model in models else ()
    return Shape(
        kind=flavor.kind,
        gpu_count=request.gpu_count,
        memory_mib=request.vgpu_memory_mib or flavor.memory_mib,
        cores_percent=request.vgpu_cores_percent or flavor.cores_percent,
        mig_profile=request.mig_profile or flavor.mig_profile,
        models=models,
        workload_kind=request.kind,
        allow_shared_node=request.allow_shared_node,
        node_selector=tuple(sorted(request.node_selector)),
        tolerations=tuple(sorted(set(request.tolerations))),
        pools=tuple(sorted(set(request.pools))),
        cpu_millicores=max(0, request.cpu_millicores),
        host_memory_mib=max(0, request.memory_mib),
        distributed=request.distributed,
    )


def victim_order(rec: AllocRecord) -> tuple[int, int, float, str]:
    """Preemption preference: borrowed first, lower priority, newest, then id."""
    return (0 if rec.borrowed else 1, rec.priority, -rec.started_at, rec.id)


# A claim on one device: (device, whole, memory_mib, cores_percent, mig_bits), the fields of its
# `CardUsage` kept flat, as the device lists below are, for the placement loops' speed.
Claim = tuple[int, bool, int, int, int]


@dataclass(slots=True)
class AllocRecord:
    """Internal, mutable record of running or just-admitted work."""

    id: str
    team: str
    project: str
    flavor: str
    ge: float
    priority: int
    preemptible: bool
    borrowed: bool
    started_at: float
    end: float
    exclusive_node: bool
    claims: tuple[Claim, ...]
    nodes: tuple[int, ...]
    model: str
    from_snapshot: bool
    # Host resources held on each of `nodes` (one pod per node).
    cpu_millicores: int = 0
    memory_mib: int = 0


#: Free host CPU/memory of a node that does not report it: large enough that nothing is refused.
UNLIMITED = 1 << 62


@dataclass(frozen=True, slots=True)
class NodeEnds:
    """A node's availability timeline: its running work in order of expected end (then id), and
    what has been given back on the node once each has ended (cumulative, from the first)."""

    version: int  # FleetState.node_version of the node when built
    recs: tuple[AllocRecord, ...]
    ends: tuple[float, ...]
    cards: tuple[int, ...]  # claims on the node's cards
    cpu_millicores: tuple[int, ...]
    memory_mib: tuple[int, ...]
    first_exclusive: int  # position of the first allocation holding the node exclusively; -1


class FleetState:
    """Flattened nodes and devices plus the allocations holding them."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.pools: dict[str, Pool] = {p.name: p for p in snapshot.pools}
        nodes = sorted(snapshot.nodes, key=lambda n: n.id)
        self.node_ids: list[str] = [n.id for n in nodes]
        self.node_of: dict[str, int] = {nid: i for i, nid in enumerate(self.node_ids)}
        self.node_pool: list[str] = [n.pool for n in nodes]
        self.node_model: list[str] = [n.gpu_model for n in nodes]
        self.node_labels: list[dict[str, str]] = [dict(n.labels) for n in nodes]
        self.node_schedulable: list[bool] = [n.schedulable for n in nodes]
        # Taint keys a workload must tolerate itself (pool taints are tolerated by admission).
        self.node_taint_keys: list[frozenset[str]] = []
        for n in nodes:
            pool = self.pools.get(n.pool)
            pool_keys = {t.key for t in pool.taints} if pool else set()
            self.node_taint_keys.append(
                frozenset(
                    t.key
                    for t in n.taints
                    if t.effect in ("NoSchedule", "NoExecute") and t.key not in pool_keys
                )
            )
        self.node_devices: list[list[int]] = [[] for _ in nodes]
        self.node_tenants: list[int] = [0] * len(nodes)
        self.node_preemptible: list[int] = [0] * len(nodes)
        self.node_exclusive: list[bool] = [False] * len(nodes)
        self.node_allocs: list[dict[str, None]] = [{} for _ in nodes]
        # Host resources: what the node offers the portal's work, and what is free of it now
        # (UNLIMITED where the node does not report the resource).
        self.node_cpu_total: list[int] = [
            UNLIMITED if n.cpu_millicores is None else max(0, n.cpu_millicores) for n in nodes
        ]
        self.node_mem_total: list[int] = [
            UNLIMITED if n.memory_mib is None else max(0, n.memory_mib) for n in nodes
        ]
        self.node_cpu_free: list[int] = list(self.node_cpu_total)
        self.node_mem_free: list[int] = list(self.node_mem_total)

        devices = sorted(
            (d for d in snapshot.devices if d.node_id in self.node_of),
            key=lambda d: (self.node_of[d.node_id], d.index),
        )
        self.dev_of: dict[tuple[str, int], int] = {}
        self.dev_node: list[int] = []
        self.dev_index: list[int] = []
        self.mem_total: list[int] = []
        self.mem_free: list[int] = []
        self.cores_free: list[int] = []
        self.dev_mode: list[int] = []
        self.mig_mask: list[int] = []
        # Per MIG device with a fixed layout: profile → start slices of its instances; None
        # where any legal start may be used.
        self.mig_layout: list[dict[str, tuple[int, ...]] | None] = []
        self.whole: list[bool] = []
        # vGPU shares each card holds, and how many it may (0: no limit; HAMi's split count).
        self.shares: list[int] = []
        self.share_limit: list[int] = []
        # Cards that hold as many vGPU shares as their split count allows.
        self.at_share_limit: set[int] = set()
        for d in devices:
            i = len(self.dev_node)
            node = self.node_of[d.node_id]
            pool = self.pools.get(self.node_pool[node])
            mode = _MODES[pool.sharing] if pool else MODE_EXCLUSIVE
            if mode == MODE_MIG and not d.mig_capable:
                mode = MODE_EXCLUSIVE
            self.dev_of[(d.node_id, d.index)] = i
            self.dev_node.append(node)
            self.dev_index.append(d.index)
            self.mem_total.append(d.memory_total_mib)
            self.mem_free.append(min(d.memory_free_mib, d.memory_total_mib))
            self.cores_free.append(min(d.cores_free_percent, 100))
            self.dev_mode.append(mode)
            self.mig_mask.append(d.mig_used_mask & FULL_MIG_MASK if mode == MODE_MIG else 0)
            self.mig_layout.append(
                mig_layout_starts(d.mig_layout) if mode == MODE_MIG and d.mig_layout else None
            )
            self.whole.append(d.whole_allocated)
            self.shares.append(0)
            self.share_limit.append(max(0, d.vgpu_share_limit) if mode == MODE_VGPU else 0)
            self.node_devices[node].append(i)

        self.node_free: list[int] = [
            sum(1 for d in self.node_devices[n] if self.fully_free(d)) for n in range(len(nodes))
        ]
        # The card count of the fleet's largest node: the scale of the node scores (scores.py).
        self.largest_node: int = max((len(devs) for devs in self.node_devices), default=0)
        # Short-request reserve: GE capacity and GE held per pool that has one (reserve.py).
        # Only pools with a reserve are tracked, so fleets without one pay nothing.
        self.pool_capacity: dict[str, float] = {}
        self.pool_used: dict[str, float] = {}
        for p in snapshot.pools:
            if p.short_reserve_fraction > 0:
                self.pool_capacity[p.name] = 0.0
                self.pool_used[p.name] = 0.0
        if self.pool_capacity:
            for d in devices:
                ni = self.node_of[d.node_id]
                if self.node_schedulable[ni] and self.node_pool[ni] in self.pool_capacity:
                    self.pool_capacity[self.node_pool[ni]] += 1.0
        self.allocs: dict[str, AllocRecord] = {}
        # Per node, bumped like `pool_version`; the availability timelines built from it.
        self.node_version: list[int] = [0] * len(nodes)
        self._ends: dict[int, NodeEnds] = {}
        self.backfill_nodes: dict[object, list[int]] = {}  # backfill.candidates
        # Per pool, bumped on every apply/release there that is not a dry run (notify=False:
        # undone before anyone reads), so caches of derived figures know they are stale.
        self.pool_version: dict[str, int] = {p.name: 0 for p in snapshot.pools}
        self._claim_values: dict[tuple[Claim, str | None], DeviceClaim] = {}
        # Called with (node, changed devices or None for all) after apply/release.
        self.listener: Callable[[int, tuple[int, ...] | None], None] | None = None
        self.flavors: dict[str, Flavor] = {f.id: f for f in snapshot.flavors}
        for a in sorted(snapshot.allocations, key=lambda a: a.request_id):
            rec = self._record_from_allocation(a)
            if rec is not None:
                self.allocs[rec.id] = rec
                self._attach(rec)  # GPU capacity is already reflected in the device state
                self._count_shares(rec, 1)  # the share counts are not
                self._take_host(rec, 1)
                if self.pool_used:
                    self._charge_pool(rec, rec.ge)
        # Preemption candidates: running preemptible work per node, cheapest victim first.
        self.node_victims: dict[int, list[AllocRecord]] = {}
        for rec in self.allocs.values():
            if rec.preemptible:
                for ni in rec.nodes:
                    self.node_victims.setdefault(ni, []).append(rec)
        for lst in self.node_victims.values():
            lst.sort(key=victim_order)
        self._victim_nodes: dict[object, list[int]] = {}
        self.victim_node_cache: dict[object, dict[int, None]] = {}  # preemption.victim_nodes
        self.victim_nodes_by_tf: dict[tuple[str, str], list[int]] = {}
        for vn in sorted(self.node_victims):
            for rec in self.node_victims[vn]:
                where = self.victim_nodes_by_tf.setdefault((rec.team, rec.flavor), [])
                if not where or where[-1] != vn:
                    where.append(vn)

    # ------------------------------------------------------------------ construction helpers

    def claim_from(self, c: DeviceClaim) -> Claim | None:
        dev = self.dev_of.get((c.node_id, c.device_index))
        if dev is None:
            return None
        used = c.usage
        return (dev, used.whole, used.memory_mib, used.cores_percent, used.mig_mask)

    def mig_profile_of(self, req: Request) -> str | None:
        """The MIG profile a request asks for: its own, else its flavor's."""
        flavor = self.flavors.get(req.flavor)
        return req.mig_profile or (flavor.mig_profile if flavor else None)

    def device_claim(self, claim: Claim, mig_profile: str | None = None) -> DeviceClaim:
        """The public value for an internal claim (cached: equal claims share one value).

        A MIG claim keeps only its slices; `mig_profile` names the profile it was placed for
        (several profiles share a slice count: 1g.10gb and 1g.20gb)."""
        key = (claim, mig_profile)
        hit = self._claim_values.get(key)
        if hit is None:
            hit = self._claim_values[key] = self._device_claim(claim, mig_profile)
        return hit

    def _device_claim(self, claim: Claim, mig_profile: str | None) -> DeviceClaim:
        dev, whole, mem, cores, bits = claim
        profile: str | None = None
        start: int | None = None
        if bits:
            start = (bits & -bits).bit_length() - 1
            size = bin(bits).count("1")
            named = MIG_PROFILES.get(mig_profile or "")
            if named is not None and named.slices == size:
                profile = named.name
            else:
                profile = next((p.name for p in MIG_PROFILES.values() if p.slices == size), None)
        return DeviceClaim(
            node_id=self.node_ids[self.dev_node[dev]],
            device_index=self.dev_index[dev],
            whole=whole,
            memory_mib=mem,
            cores_percent=cores,
            mig_profile=profile,
            mig_start=start,
        )

    def _record_from_allocation(self, a: Allocation) -> AllocRecord | None:
        claims = tuple(c for c in (self.claim_from(x) for x in a.placement) if c is not None)
        if not claims:
            return None
        nodes = tuple(dict.fromkeys(self.dev_node[c[0]] for c in claims))
        return AllocRecord(
            id=a.request_id,
            team=a.team,
            project=a.project,
            flavor=a.flavor,
            ge=a.gpu_equivalents,
            priority=a.priority,
            preemptible=a.preemptible,
            borrowed=a.borrowed,
            started_at=a.started_at,
            end=a.expected_end,
            exclusive_node=a.exclusive_node,
            claims=claims,
            nodes=nodes,
            model=self.node_model[nodes[0]],
            from_snapshot=True,
            cpu_millicores=max(0, a.cpu_millicores),
            memory_mib=max(0, a.memory_mib),
        )

    # ------------------------------------------------------------------ queries

    def forget_victim_nodes(self) -> None:
        """Drop the cached victim nodes per group (running preemptible work changed)."""
        self._victim_nodes.clear()
        self.victim_node_cache.clear()

    def group_victim_nodes(self, key: object, nodes: list[int]) -> list[int]:
        """Nodes of a group that hosted preemptible running work at the start (cached)."""
        got = self._victim_nodes.get(key)
        if got is None:
            got = self._victim_nodes[key] = [n for n in nodes if n in self.node_victims]
        return got

    def node_ends(self, node: int) -> NodeEnds:
        """The node's availability timeline (`NodeEnds`), rebuilt only after its running work
        changed."""
        hit = self._ends.get(node)
        version = self.node_version[node]
        if hit is not None and hit.version == version:
            return hit
        recs = tuple(
            sorted((self.allocs[i] for i in self.node_allocs[node]), key=lambda r: (r.end, r.id))
        )
        cards: list[int] = []
        cpu: list[int] = []
        mem: list[int] = []
        first_exclusive = -1
        dev_node = self.dev_node
        n_cards = n_cpu = n_mem = 0
        for pos, rec in enumerate(recs):
            n_cards += sum(1 for c in rec.claims if dev_node[c[0]] == node)
            n_cpu += rec.cpu_millicores
            n_mem += rec.memory_mib
            cards.append(n_cards)
            cpu.append(n_cpu)
            mem.append(n_mem)
            if rec.exclusive_node and first_exclusive < 0:
                first_exclusive = pos
        hit = self._ends[node] = NodeEnds(
            version,
            recs,
            tuple(r.end for r in recs),
            tuple(cards),
            tuple(cpu),
            tuple(mem),
            first_exclusive,
        )
        return hit

    def host_fits(self, node: int, cpu_millicores: int, memory_mib: int) -> bool:
        """The node has `cpu_millicores` and `memory_mib` of host resources free now."""
        return self.node_cpu_free[node] >= cpu_millicores and self.node_mem_free[node] >= memory_mib

    def host_tracked(self, node: int) -> bool:
        """The node reports its CPU or memory (otherwise host resources never limit it)."""
        return self.node_cpu_total[node] != UNLIMITED or self.node_mem_total[node] != UNLIMITED

    def fully_free(self, dev: int) -> bool:
        return (
            not self.whole[dev]
            and self.mig_mask[dev] == 0
            and self.mem_free[dev] == self.mem_total[dev]
            and self.cores_free[dev] == 100
        )

    def free_whole_count(self, node: int) -> int:
        """Fully free cards on `node` (maintained on every apply/release)."""
        return self.node_free[node]

    def mig_starts_of(self, dev: int, profile: str) -> tuple[int, ...]:
        """Start slices where an instance of `profile` may sit on `dev`: its layout's, or all
        legal ones on a card without a fixed layout."""
        layout = self.mig_layout[dev]
        if layout is None:
            return MIG_PROFILES[profile].starts
        return layout.get(profile, ())

    def mig_free_slices(self, dev: int) -> int:
        return MIG_SLICES - bin(self.mig_mask[dev]).count("1")

    # ------------------------------------------------------------------ mutation

    def _charge_pool(self, rec: AllocRecord, ge: float) -> None:
        """Count `ge` against the reserve of the pool `rec` runs in (schedulable nodes only)."""
        node = rec.nodes[0]
        pool = self.node_pool[node]
        if pool in self.pool_used and self.node_schedulable[node]:
            self.pool_used[pool] += ge

    def _take_host(self, rec: AllocRecord, sign: int) -> None:
        """Take (sign 1) or give back (sign -1) the host resources `rec` holds on its nodes."""
        cpu, mem = rec.cpu_millicores * sign, rec.memory_mib * sign
        if cpu or mem:
            for n in rec.nodes:
                self.node_cpu_free[n] -= cpu
                self.node_mem_free[n] -= mem

    def _count_shares(self, rec: AllocRecord, sign: int) -> None:
        """Count (sign 1) or uncount (-1) the vGPU shares `rec` holds: its claims that are
        neither a whole card nor a MIG instance."""
        for dev, whole, _, _, bits in rec.claims:
            if not whole and not bits:
                self._add_share(dev, sign)

    def _add_share(self, dev: int, sign: int) -> None:
        shares = self.shares[dev] = self.shares[dev] + sign
        limit = self.share_limit[dev]
        if limit and shares >= limit:
            self.at_share_limit.add(dev)
        else:
            self.at_share_limit.discard(dev)

    def share_room(self, dev: int) -> bool:
        """The card may take one more vGPU share (its split count is not reached)."""
        limit = self.share_limit[dev]
        return limit == 0 or self.shares[dev] < limit

    def _attach(self, rec: AllocRecord) -> None:
        for n in rec.nodes:
            self.node_tenants[n] += 1
            if rec.preemptible:
                self.node_preemptible[n] += 1
            if rec.exclusive_node:
                self.node_exclusive[n] = True
            self.node_allocs[n][rec.id] = None

    def _detach(self, rec: AllocRecord) -> None:
        for n in rec.nodes:
            self.node_tenants[n] -= 1
            if rec.preemptible:
                self.node_preemptible[n] -= 1
            if rec.exclusive_node:
                self.node_exclusive[n] = False
            self.node_allocs[n].pop(rec.id, None)

    def apply(self, rec: AllocRecord, notify: bool = True) -> None:
        """Take the capacity `rec` claims and register it."""
        node_free = self.node_free
        for dev, whole, mem, cores, bits in rec.claims:
            if self.fully_free(dev):
                node_free[self.dev_node[dev]] -= 1
            if whole:
                self.whole[dev] = True
            else:
                self.mem_free[dev] -= mem
                self.cores_free[dev] -= cores
                self.mig_mask[dev] |= bits
                if not bits:
                    self._add_share(dev, 1)
        self.allocs[rec.id] = rec
        self._attach(rec)
        self._take_host(rec, 1)
        if self.pool_used:
            self._charge_pool(rec, rec.ge)
        if notify:
            self._bump(rec)
            if self.listener is not None:
                self._notify(rec)

    def release(self, rec: AllocRecord, notify: bool = True) -> None:
        """Give back the capacity `rec` claims and forget it."""
        node_free = self.node_free
        for dev, whole, mem, cores, bits in rec.claims:
            if whole:
                self.whole[dev] = False
            else:
                self.mem_free[dev] = min(self.mem_total[dev], self.mem_free[dev] + mem)
                self.cores_free[dev] = min(100, self.cores_free[dev] + cores)
                self.mig_mask[dev] &= ~bits
                if not bits:
                    self._add_share(dev, -1)
            if self.fully_free(dev):
                node_free[self.dev_node[dev]] += 1
        self.allocs.pop(rec.id, None)
        self._detach(rec)
        self._take_host(rec, -1)
        if self.pool_used:
            self._charge_pool(rec, -rec.ge)
        if notify:
            self._bump(rec)
            if self.listener is not None:
                self._notify(rec)

    def _bump(self, rec: AllocRecord) -> None:
        for n in rec.nodes:
            self.node_version[n] += 1
            pool = self.node_pool[n]
            self.pool_version[pool] = self.pool_version.get(pool, 0) + 1

    def _notify(self, rec: AllocRecord) -> None:
        assert self.listener is not None
        if rec.exclusive_node or len(rec.nodes) > 1:
            for n in rec.nodes:
                self.listener(n, None)
        else:
            claims = rec.claims
            devs = (
                (claims[0][0],) if len(claims) == 1 else tuple(dict.fromkeys(c[0] for c in claims))
            )
            self.listener(rec.nodes[0], devs)
