"""The planner as the replay runs it: one `Scheduler` planning cycle after cycle on its own state.

Rebuilding a `Scheduler` from a snapshot for every cycle of a week on a 2,000-node fleet would
take most of the replay's time budget. `ReplayScheduler` keeps the indexed state instead and,
between cycles, puts it into the form `Scheduler(snapshot)` would build from the same fleet:
per-cycle memos and reservations cleared, capacity buckets back in node and device order,
preemption candidates re-sorted. A cycle then plans exactly what a fresh planner plans
(tests/engine/test_replay.py compares the two on random traces).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import replace

from .planner import Scheduler
from .state import MODE_MIG, AllocRecord, victim_order
from .types import Allocation, CardUsage, Policy, Request, Snapshot

_DRIFT = 1e-9


class ReplayScheduler(Scheduler):
    """A Scheduler that plans one cycle after another on its own evolving state.

    `begin_cycle` brings the state into the form `Scheduler(snapshot)` builds: cleared memos and
    reservations, index buckets in node/device order, preemption candidates per node sorted as
    `FleetState` sorts them. `finish` ends running work between cycles.
    """

    def __init__(self, snapshot: Snapshot, policy: Policy) -> None:
        super().__init__(snapshot, policy)
        self._refreshed: dict[int, None] = {}  # nodes re-filed in the index since last cycle
        self._victims_stale: dict[int, None] = {}  # nodes whose running work changed
        self._node_tfs: dict[int, frozenset[tuple[str, str]]] = defaultdict(frozenset)
        self._tf_nodes: dict[tuple[str, str], set[int]] = defaultdict(set)
        for tf, nodes in self.st.victim_nodes_by_tf.items():
            self._tf_nodes[tf] = set(nodes)
            for n in nodes:
                self._node_tfs[n] |= {tf}
        refresh = self.index.refresh_node

        def listener(node: int, devices: tuple[int, ...] | None = None) -> None:
            refresh(node, devices)
            self._refreshed[node] = None

        self.st.listener = listener

    def record(self, request_id: str) -> AllocRecord | None:
        return self.st.allocs.get(request_id)

    def eligible_pools(self, request: Request) -> tuple[str, ...]:
        flavor = self.st.flavors.get(request.flavor)
        if flavor is None:
            return ()
        groups, _ = self.placer.groups_for(self._shape(request, flavor)[0])
        return tuple(sorted({g.pool.name for g in groups}))

    def finish(self, rec: AllocRecord) -> None:
        """Running work ended: give its capacity, quota and share back."""
        self.st.release(rec)
        self.ledger.charge(rec.team, rec.project, rec.flavor, -rec.ge)
        self._settle(rec.team, rec.flavor, rec.project)
        owner = self.owner.pop(rec.id, "")
        self._use(rec.team, owner, rec.model, -rec.ge)
        for use in (self.usage[rec.team], self.member_usage[(rec.team, owner)]):
            if abs(use[rec.model]) < _DRIFT:
                use[rec.model] = 0.0
        self.touched(rec)

    def touched(self, rec: AllocRecord) -> None:
        """`rec` started or stopped: its nodes' preemption candidates need re-sorting."""
        for n in rec.nodes:
            self._victims_stale[n] = None

    def after_preemption(self, rec: AllocRecord) -> None:
        """The planner evicted `rec`; snap the sums it lowered back to zero when they drift."""
        self._settle(rec.team, rec.flavor, rec.project)
        use = self.usage[rec.team]
        if abs(use[rec.model]) < _DRIFT:
            use[rec.model] = 0.0
        self.touched(rec)

    def _settle(self, team: str, flavor: str, project: str) -> None:
        led = self.ledger
        for table, key in (
            (led.used, (team, flavor)),
            (led.project_used, (team, project, flavor)),
        ):
            if abs(table[key]) < _DRIFT:  # type: ignore[index]
                table[key] = 0.0  # type: ignore[index]
        cohort = led.cohort_of.get(team)
        if cohort is not None and abs(led.cohort_used[(cohort, flavor)]) < _DRIFT:
            led.cohort_used[(cohort, flavor)] = 0.0

    def begin_cycle(self, pending: tuple[Request, ...]) -> None:
        st = self.st
        # 1. Per-cycle planner state, as a new Scheduler starts it.
        self.snapshot = replace(self.snapshot, pending=pending)
        self.placer.reset_mix(pending)
        self.holds = []
        self._fail.clear()
        self.forget_failed_preemptions()
        self._by_reserve.clear()
        self._blocked.clear()
        self._share.clear()
        self._member_share.clear()
        self._queue = None
        self._planned = False
        # 2. Capacity buckets in the order a fresh index files them (node, then device order).
        index = self.index
        dirty: dict[int, tuple[dict[int, None], set[int]]] = {}
        for node in self._refreshed:
            g = index.node_group.get(node)
            if g is None:
                continue
            filed: list[tuple[dict[int, None], int]] = []
            k = g.node_k.get(node)
            if k:
                filed.append((g.whole[k], node))
            for d in st.node_devices[node]:
                b = g.dev_vb.get(d)
                if b is not None:
                    filed.append((g.vgpu[b], d))
                if st.dev_mode[d] == MODE_MIG:
                    filed.extend((g.mig[p][s], d) for p, s in g.dev_mig.get(d, ()))
            for bucket, key in filed:
                dirty.setdefault(id(bucket), (bucket, set()))[1].add(key)
        for bucket, keys in dirty.values():
            if not _in_order(bucket, keys):
                items = sorted(bucket)
                bucket.clear()
                bucket.update(dict.fromkeys(items))
        self._refreshed.clear()
        # 3. Preemption candidates: per node sorted by victim order, per (team, flavor) the
        #    nodes in node order; the caches built from them start empty.
        stale_tfs: set[tuple[str, str]] = set()
        for node in self._victims_stale:
            recs = [st.allocs[i] for i in st.node_allocs[node]]
            victims = sorted((r for r in recs if r.preemptible), key=victim_order)
            if victims:
                st.node_victims[node] = victims
            else:
                st.node_victims.pop(node, None)
            tfs = frozenset((r.team, r.flavor) for r in victims)
            old = self._node_tfs[node]
            for tf in old - tfs:
                self._tf_nodes[tf].discard(node)
                stale_tfs.add(tf)
            for tf in tfs - old:
                self._tf_nodes[tf].add(node)
                stale_tfs.add(tf)
            self._node_tfs[node] = tfs
        self._victims_stale.clear()
        for tf in stale_tfs:
            nodes = self._tf_nodes[tf]
            if nodes:
                st.victim_nodes_by_tf[tf] = sorted(nodes)
            else:
                st.victim_nodes_by_tf.pop(tf, None)
        st.victim_node_cache.clear()
        st._victim_nodes.clear()  # noqa: SLF001 - the engine's own cache, rebuilt on demand


def _in_order(bucket: dict[int, None], moved: set[int]) -> bool:
    """Whether `bucket` is still in key order. Keys not in `moved` kept their order since the
    last sort, and moved keys were re-filed at the end, so only the tail needs a look."""
    prev: int | None = None
    for key in reversed(bucket):
        if prev is not None and key > prev:
            return False
        if key not in moved:
            return True
        prev = key
    return True


def starting_snapshot(fleet: Snapshot, allocations: Iterable[Allocation]) -> Snapshot:
    """`fleet` with `allocations` running: device free capacity reduced by their claims."""
    running = tuple(allocations)
    used: dict[tuple[str, int], CardUsage] = defaultdict(CardUsage)
    for a in running:
        for c in a.placement:
            used[(c.node_id, c.device_index)] += c.usage
    devices = tuple(d.holding(used[(d.node_id, d.index)]) for d in fleet.devices)
    return replace(fleet, devices=devices, allocations=running, pending=())
