"""The one simulation loop: the live planner run cycle after cycle on a moving clock.

The forecast (forecast.py) and the policy replay (replay.py) both run it. `Simulation(snapshot,
policy)` holds the fleet with its running work, the queue and a list of events; the caller adds
events (`arrive`, `withdraw`, `running_until`, `wake`) and calls `run`:

1. Take the earliest event. The cycle runs at its tick: with `cycle_seconds`, the first tick
   origin + k x cycle_seconds at or after the event (the live cycle's beat; a tick with no event
   would plan the same state again and is skipped); without, at the event itself.
2. Apply the events up to tick + `resolution_seconds` in time order: ended work gives its
   capacity, quota and share back, withdrawn requests leave the queue, arrivals join it.
3. One planning cycle over the queue at the tick (`Scheduler.plan`, the live planner and policy).
   A request left waiting past its team's or project's limit is set aside and planned again only
   once that limit could let it in: after the team's usage of the flavor fell (work ended or was
   preempted). The planner would give it no turn meanwhile (planner.py, step 2), so the plans
   differ only in the quota waits they list, and a week's queue of them costs nothing per cycle.
   Reservations carry over to the next cycle, as the live cycle stores them. A preempted request
   goes back to the queue with its age, considered again at the next tick, until it has started
   `max_attempts` times (or when its request is unknown); then it is dropped. Admitted work
   starts at the tick and ends after the runtime given at its arrival.
4. Repeat until no event is left, the next tick is past `until`, `max_cycles` cycles ran, or
   `done()` says so.

One `RollingScheduler` keeps the indexed state from cycle to cycle and is brought back, before
each cycle, to the state a fresh `Scheduler` would build from the same fleet; so a cycle here plans
what the live cycle plans (tests/engine/test_replay.py checks it against a fresh planner each
cycle, tests/scheduling/test_replay.py against `run_cycle`). An `Observer` sees every change, for
the replay's time-weighted figures.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, insort
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, replace

from .planner import Scheduler
from .quota import LimitKey, limit_key
from .state import MODE_MIG, AllocRecord, Shape, is_gang, victim_order
from .types import Allocation, CardUsage, Plan, Policy, Request, Snapshot

#: Kinds of event, in the order they apply at the same instant.
COMPLETE, WITHDRAW, ARRIVE, WAKE = 0, 1, 2, 3
#: Sums of running GE closer to zero than this are zero (float drift).
DRIFT = 1e-9


@dataclass(frozen=True, slots=True)
class Start:
    """A request the simulation started: in which cycle (1-based), when, where, which attempt."""

    request_id: str
    cycle: int
    at: float
    node_ids: tuple[str, ...]
    attempt: int


class Observer:
    """What a simulation tells as it goes (the default hears nothing)."""

    def advance(self, at: float) -> None:
        """The clock moves to `at`, before what happens then."""

    def started(self, rec: AllocRecord) -> None:
        """Work started."""

    def stopped(self, rec: AllocRecord) -> None:
        """Running work ended or was preempted."""

    def queued(self, request: Request) -> None:
        """A request joined the queue (arrived, or back after a preemption)."""

    def left_queue(self, request: Request) -> None:
        """A request left the queue (started or withdrawn)."""

    def cycled(self, tick: float, plan: Plan, pending: Mapping[str, Request]) -> None:
        """A cycle at `tick` planned `plan`; `pending` waits after it."""


class Simulation:
    """The fleet, its running work, the queue and the events of one simulated run."""

    def __init__(
        self,
        snapshot: Snapshot,
        policy: Policy,
        *,
        max_attempts: int = 3,
        observer: Observer | None = None,
    ) -> None:
        self.sched = RollingScheduler(replace(snapshot, pending=()), policy)
        self.max_attempts = max_attempts
        self.observer = observer or Observer()
        self.requests: dict[str, Request] = {}
        self.runtime: dict[str, float] = {}
        self.attempt: dict[str, int] = {}
        self.withdrawn_at: dict[str, float] = {}
        self.pending: dict[str, Request] = {}  # everything waiting
        self._queue: dict[str, Request] = {}  # what the next cycle considers: pending, not parked
        # Requests past a limit, by team and by what the limit check reads; teams whose usage
        # fell since the last cycle, whose parked requests are checked again.
        self._parked: dict[str, dict[LimitKey, dict[str, Request]]] = {}
        self._freed: set[str] = set()
        self._lapsing: list[str] = []  # parked in the last cycle while holding a reservation
        self.placed: dict[str, AllocRecord] = dict(self.sched.st.allocs)  # running, by request
        self.starts: list[Start] = []
        self.preempted: list[tuple[str, int]] = []  # (request, cycle)
        self.cycles = self.finished = self.withdrawn = self.failed = 0
        self._events: list[tuple[float, int, int, str, int]] = []  # (at, kind, seq, id, attempt)
        self._seq = 0

    def _push(self, at: float, kind: int, request_id: str, attempt: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._events, (at, kind, self._seq, request_id, attempt))

    def running_until(
        self,
        request_id: str,
        at: float | None,
        *,
        request: Request | None = None,
        runtime_seconds: float = 0.0,
    ) -> None:
        """Work of the snapshot ends at `at` (None: not within the run). Preempted, it goes back
        to the queue as `request` and runs `runtime_seconds`; without `request` it is dropped."""
        self.attempt[request_id] = 1
        if request is not None:
            self.requests[request_id] = request
            self.runtime[request_id] = runtime_seconds
        if at is not None:
            self._push(at, COMPLETE, request_id, 1)

    def arrive(self, request: Request, at: float, *, runtime_seconds: float) -> None:
        """`request` joins the queue at `at` and runs `runtime_seconds` once started."""
        self.requests[request.id] = request
        self.attempt[request.id] = 0
        self.runtime[request.id] = runtime_seconds
        self._push(at, ARRIVE, request.id)

    def withdraw(self, request_id: str, at: float) -> None:
        """The request leaves the queue at `at` unless it started before."""
        self.withdrawn_at[request_id] = at
        self._push(at, WITHDRAW, request_id)

    def wake(self, at: float) -> None:
        """A cycle at the tick of `at` even if nothing else happens then."""
        self._push(at, WAKE, "")

    def run(
        self,
        *,
        origin: float,
        until: float = math.inf,
        cycle_seconds: float = 0.0,
        resolution_seconds: float = 0.0,
        max_cycles: int | None = None,
        done: Callable[[], bool] | None = None,
    ) -> None:
        """Steps 1-4 of the module docstring."""
        events, sched, seen = self._events, self.sched, self.observer
        next_k = 0
        while events and events[0][0] <= until:
            if max_cycles is not None and self.cycles >= max_cycles:
                return
            # 1. The tick of the earliest event.
            tick = events[0][0]
            if cycle_seconds > 0:
                k = max(next_k, math.ceil((tick - origin) / cycle_seconds - 1e-9))
                tick = origin + k * cycle_seconds
                if tick > until:
                    return
                next_k = k + 1
            # 2. Events up to the tick, in time order.
            while events and events[0][0] <= tick + resolution_seconds:
                at, kind, _, rid, att = heapq.heappop(events)
                if kind == COMPLETE:
                    rec = self.placed.get(rid)
                    if rec is None or self.attempt[rid] != att:
                        continue  # preempted meanwhile
                    seen.advance(at)
                    self._stop(rec)
                    sched.finish(rec)
                    self.finished += 1
                elif kind == WITHDRAW:
                    if (gone := self.pending.pop(rid, None)) is not None:
                        seen.left_queue(gone)
                        self.withdrawn += 1
                        if self._queue.pop(rid, None) is None:
                            self._unpark(gone)
                elif kind == ARRIVE and (
                    rid not in self.placed
                    and rid not in self.pending
                    and self.withdrawn_at.get(rid, math.inf) > at
                ):
                    self.pending[rid] = self._queue[rid] = self.requests[rid]
                    seen.queued(self.requests[rid])
            seen.advance(tick)
            # 3. One planning cycle over the queue; the planner has already released the victims
            #    and placed the admitted work.
            self._release_parked()
            self.cycles += 1
            sched.begin_cycle(tuple(self._queue.values()), mix=self.pending.values())
            plan = sched.plan(tick)
            self._apply(plan, tick, cycle_seconds)
            self._park(plan)
            seen.cycled(tick, plan, self.pending)
            if done is not None and done():
                return

    def _apply(self, plan: Plan, tick: float, cycle_seconds: float) -> None:
        sched, pending, queue = self.sched, self.pending, self._queue
        held = {r.request_id: r.start_at for r in plan.reservations}
        for rid, waiting in queue.items():  # parked requests hold no reservation
            if waiting.reserved_start_at != held.get(rid):
                queue[rid] = pending[rid] = replace(waiting, reserved_start_at=held.get(rid))
        for pre in plan.preemptions:
            rid = pre.victim_id
            victim = self.placed[rid]
            self.preempted.append((rid, self.cycles))
            self._stop(victim)
            sched.after_preemption(victim)
            if rid not in self.requests or self.attempt[rid] >= self.max_attempts:
                self.failed += 1
            else:
                pending[rid] = queue[rid] = self.requests[rid]
                self.observer.queued(self.requests[rid])
                self._push(tick + cycle_seconds, ARRIVE, rid)  # considered again next tick
        for adm in plan.admissions:
            rid = adm.request_id
            self.observer.left_queue(pending.pop(rid))
            queue.pop(rid, None)
            self.attempt[rid] += 1
            rec = sched.st.allocs[rid]
            self.placed[rid] = rec
            self.observer.started(rec)
            sched.touched(rec, started=True)
            self.starts.append(Start(rid, self.cycles, tick, adm.node_ids, self.attempt[rid]))
            self._push(tick + self.runtime[rid], COMPLETE, rid, self.attempt[rid])

    def _stop(self, rec: AllocRecord) -> None:
        del self.placed[rec.id]
        self._freed.add(rec.team)
        self.observer.stopped(rec)

    def _limit_key(self, request: Request) -> LimitKey:
        return limit_key(request, self.sched.st.flavors[request.flavor])  # a quota wait's flavor

    def _park(self, plan: Plan) -> None:
        """Set aside the requests `plan` left waiting past a limit (see step 3)."""
        over: dict[LimitKey, bool] = {}
        for waiting in reversed(plan.waiting):
            if waiting.code != "quota":
                break  # quota waits come last
            req = self._queue[waiting.request_id]
            key = self._limit_key(req)
            if key not in over:
                over[key] = self.sched.ledger.over_limit(*key) is not None
            if over[key]:
                del self._queue[req.id]
                self._parked.setdefault(key[0], {}).setdefault(key, {})[req.id] = req
                if req.reserved_start_at is not None:
                    self._lapsing.append(req.id)

    def _release_parked(self) -> None:
        """Queue again the parked requests that a fall in their team's usage may let in."""
        over_limit = self.sched.ledger.over_limit
        for team in self._freed:
            by_key = self._parked.get(team, {})
            for key in [k for k in by_key if over_limit(*k) is None]:
                self._queue.update(by_key.pop(key))
        self._freed.clear()
        # A reservation survives one cycle past its limit: the next cycle drops it (it keeps
        # holds within quota only), unless the request is let in again for that very cycle.
        for rid in self._lapsing:
            req = self.pending.get(rid)
            if req is not None and rid not in self._queue:  # still parked
                key = self._limit_key(req)
                self._parked[key[0]][key][rid] = self.pending[rid] = replace(
                    req, reserved_start_at=None
                )
        self._lapsing.clear()

    def _unpark(self, request: Request) -> None:
        """A parked request left the queue (withdrawn)."""
        key = self._limit_key(request)
        by_key = self._parked[key[0]]
        del by_key[key][request.id]
        if not by_key[key]:
            del by_key[key]


class RollingScheduler(Scheduler):
    """A Scheduler that plans one cycle after another on its own evolving state.

    Rebuilding a `Scheduler` from a snapshot for every cycle of a week on a 2,000-node fleet would
    take most of the replay's time. `begin_cycle` instead brings the kept state into the form
    `Scheduler(snapshot)` builds: the planner's per-cycle state reset (`reset_cycle`), index
    buckets in node/device order, preemption candidates per node sorted as `FleetState` sorts
    them. `finish` ends running work between cycles.
    """

    def __init__(self, snapshot: Snapshot, policy: Policy) -> None:
        super().__init__(snapshot, policy)
        self._refreshed: dict[int, None] = {}  # nodes re-filed in the index since last cycle
        self._victims_stale: dict[int, None] = {}  # nodes whose preemptible work changed
        # Preemptible records per node by (team, flavor), and the nodes holding each pair; the
        # pairs whose node set changed since the last cycle.
        self._node_tfs: dict[int, Counter[tuple[str, str]]] = defaultdict(Counter)
        self._tf_nodes: dict[tuple[str, str], set[int]] = defaultdict(set)
        self._stale_tfs: set[tuple[str, str]] = set()
        for node, victims in self.st.node_victims.items():
            for rec in victims:
                self._node_tfs[node][(rec.team, rec.flavor)] += 1
                self._tf_nodes[(rec.team, rec.flavor)].add(node)
        refresh = self.index.refresh_node

        def listener(node: int, devices: tuple[int, ...] | None = None) -> None:
            refresh(node, devices)
            self._refreshed[node] = None

        self.st.listener = listener

    def eligible_pools(self, request: Request) -> tuple[str, ...]:
        """The pools where the request could run were they empty: the pool filters and the
        model pin pass, and a node of the pool holds the request's cards (a gang spreads)."""
        flavor = self.st.flavors.get(request.flavor)
        if flavor is None:
            return ()
        shape = self._shape(request, flavor)[0]
        groups, _ = self.placer.groups_for(shape)
        return tuple(sorted({g.pool.name for g in groups if _holds(g.max_devices, shape)}))

    def finish(self, rec: AllocRecord) -> None:
        """Running work ended: give its capacity, quota and share back."""
        self.st.release(rec)
        self.ledger.charge(rec.team, rec.project, rec.flavor, -rec.ge)
        self._settle(rec.team, rec.flavor, rec.project)
        owner = self.owner.pop(rec.id, "")
        self._use(rec.team, owner, rec.model, -rec.ge)
        for use in (self.usage[rec.team], self.member_usage[(rec.team, owner)]):
            if abs(use[rec.model]) < DRIFT:
                use[rec.model] = 0.0
        self.touched(rec, started=False)

    def touched(self, rec: AllocRecord, *, started: bool) -> None:
        """`rec` started or stopped: its nodes' preemption candidates, kept in victim order
        (a total order), take it in or let it go (an eviction the planner let go already)."""
        if not rec.preemptible:
            return
        victims = self.st.node_victims
        tf = (rec.team, rec.flavor)
        for n in rec.nodes:
            lst = victims.setdefault(n, [])
            counts = self._node_tfs[n]
            if started:
                insort(lst, rec, key=victim_order)
                counts[tf] += 1
                if counts[tf] == 1:
                    self._tf_nodes[tf].add(n)
                    self._stale_tfs.add(tf)
            else:
                i = bisect_left(lst, victim_order(rec), key=victim_order)
                if i < len(lst) and lst[i] is rec:
                    del lst[i]
                counts[tf] -= 1
                if not counts[tf]:
                    del counts[tf]
                    self._tf_nodes[tf].discard(n)
                    self._stale_tfs.add(tf)
            self._victims_stale[n] = None

    def after_preemption(self, rec: AllocRecord) -> None:
        """The planner evicted `rec`; snap the sums it lowered back to zero when they drift."""
        self._settle(rec.team, rec.flavor, rec.project)
        use = self.usage[rec.team]
        if abs(use[rec.model]) < DRIFT:
            use[rec.model] = 0.0
        self.touched(rec, started=False)

    def _settle(self, team: str, flavor: str, project: str) -> None:
        led = self.ledger
        for table, key in (
            (led.used, (team, flavor)),
            (led.project_used, (team, project, flavor)),
        ):
            if abs(table[key]) < DRIFT:  # type: ignore[index]
                table[key] = 0.0  # type: ignore[index]
        cohort = led.cohort_of.get(team)
        if cohort is not None and abs(led.cohort_used[(cohort, flavor)]) < DRIFT:
            led.cohort_used[(cohort, flavor)] = 0.0

    def begin_cycle(self, pending: tuple[Request, ...], mix: Collection[Request] = ()) -> None:
        st = self.st
        # 1. Per-cycle planner state, as a new Scheduler starts it.
        self.reset_cycle(pending, mix)
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
            # Only shared cards are filed one by one (none in a group of whole cards).
            for d in st.node_devices[node] if g.dev_vb or g.dev_mig else ():
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
        # 3. Preemption candidates (kept sorted by `touched`): per (team, flavor) the nodes in
        #    node order; the caches built from them start empty.
        for node in self._victims_stale:
            if not st.node_victims.get(node):
                st.node_victims.pop(node, None)
        self._victims_stale.clear()
        for tf in self._stale_tfs:
            nodes = self._tf_nodes[tf]
            if nodes:
                st.victim_nodes_by_tf[tf] = sorted(nodes)
            else:
                st.victim_nodes_by_tf.pop(tf, None)
        self._stale_tfs.clear()
        st.forget_victim_nodes()


def _holds(max_devices: int, shape: Shape) -> bool:
    """Whether a group whose largest node has `max_devices` cards could hold the shape were it
    empty: all its cards on one node (several MIG instances may share a card), or a gang."""
    return shape.kind == "mig" or shape.gpu_count <= max_devices or is_gang(shape, max_devices)


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
