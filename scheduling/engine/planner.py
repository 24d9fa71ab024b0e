"""The planning cycle: `plan(snapshot, now=..., policy=...) -> Plan`, and the `Scheduler` behind it.

`Scheduler(snapshot, policy)` flattens the snapshot (FleetState), builds the capacity index and
the quota ledger once; `plan(now)` then runs one cycle over the pending queue and
`place_one(request, now)` decides a single newly arrived request against the same indexed state.

Cycle, per request in queue order (see queue.py), work within its team's guarantee first and
borrowers (requests that would take their team past it) in a second pass, as Kueue does: a
borrower admitted first could hold capacity that guaranteed work wins back only next cycle.

1. Validate the request (known flavor, gpu_count >= 1, known MIG profile, positive runtime);
   otherwise wait with code "invalid".  vGPU/MIG requests may ask for N > 1 shares: all on one
   node (N distinct GPUs for vGPU, N instances for MIG), charged N x the flavor's GE.
2. Quota (quota.py): blocked requests wait with the ledger's reason, code "quota"; those past a
   limit (or without quota) when the cycle starts get no turn: usage drops within a cycle only
   by preemption, whose capacity goes to the preemptor (its victims' teams use the quota next).
3. Failure memo: a shape that already failed in this cycle, with no capacity freed since and the
   same reservations in its way, fails at once with the same reason.
4. Place now (placement.py), keeping off reserved devices unless the request ends before the
   reservation starts.  Success: apply claims, charge quota, update the team's share.
5. Otherwise preempt (preemption.py) if the request outranks preemptible work or reclaims its
   guarantee from borrowers.  Freed capacity clears the failure memo.
6. Otherwise, if reservations remain (Policy.max_reservations) and it has waited
   Policy.reservation_wait_seconds, reserve for it (backfill.py): it is the head; code
   "reserved".  Everyone else waits with a capacity or reservation reason.

Before the queue runs, the previous cycle's reservations are taken up again (backfill.py).

Waiting requests get 1-based positions in the order considered, borrowers after the rest, and
quota-blocked requests last (oldest first).
"""

from __future__ import annotations

import gc
from collections import defaultdict
from collections.abc import Collection, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import replace

from .backfill import (
    Hold,
    behind_reason,
    clock,
    drop_hold,
    held_requests,
    hold_of,
    keep_holds,
    reservations,
    reserve,
    reserved_reason,
)
from .index import CapacityIndex, Group
from .placement import Placer
from .preemption import find_victims, team_rose_above_guarantee
from .queue import FairQueue, dominant_share, split_by_order
from .quota import EPS, LimitKey, QuotaLedger, limit_key
from .reasons import capacity_reason, preemption_reason
from .reserve import is_long, leaves_reserve, reserve_kept, reserve_reason
from .state import AllocRecord, Claim, FleetState, Shape, is_gang, shape_fields, shape_of
from .types import (
    MIG_PROFILES,
    Admission,
    Decision,
    Flavor,
    Plan,
    Policy,
    Preemption,
    QueueKey,
    Request,
    Snapshot,
    WaitCode,
    Waiting,
)

Host = tuple[int, int]  # (millicores, MiB)
_Outcome = tuple[Admission | None, list[Preemption], str | None, WaitCode | None]


class Scheduler:
    """Indexed fleet state plus quota ledger; one planning cycle and single-request decisions."""

    def __init__(self, snapshot: Snapshot, policy: Policy | None = None) -> None:
        self.policy = policy or Policy()
        with gc_paused(self.policy.pause_gc):
            self._build(snapshot)

    def _build(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.st = FleetState(snapshot)
        self.index = CapacityIndex(self.st)
        self.placer = Placer(self.st, self.index, self.policy)
        self.ledger = QuotaLedger.of(snapshot)
        self.capacity: dict[str, float] = defaultdict(float)
        for dev in range(len(self.st.dev_node)):
            self.capacity[self.st.node_model[self.st.dev_node[dev]]] += 1.0
        self.models = tuple(sorted(self.capacity))
        self.usage: defaultdict[str, defaultdict[str, float]] = defaultdict(
            lambda: defaultdict(float)
        )
        # Usage by team member (fair share inside a team, queue.py).
        self.owner: dict[str, str] = {a.request_id: a.owner for a in snapshot.allocations}
        self.member_usage: defaultdict[tuple[str, str], defaultdict[str, float]] = defaultdict(
            lambda: defaultdict(float)
        )
        self.member_weight = {(m.team, m.name): max(m.weight, 1e-9) for m in snapshot.members}
        for rec in self.st.allocs.values():
            self.ledger.charge(rec.team, rec.project, rec.flavor, rec.ge)
            self.usage[rec.team][rec.model] += rec.ge
            self.member_usage[(rec.team, self.owner.get(rec.id, ""))][rec.model] += rec.ge
        self.weight: dict[str, float] = {}
        total_g = sum(self.ledger.guaranteed.values()) or 1.0
        for t in snapshot.teams:
            if t.weight is not None:
                w = t.weight
            elif self.policy.fair_share_weighting == "quota":
                w = self.ledger.team_guaranteed[t.name] / total_g
            else:
                w = 1.0
            self.weight[t.name] = max(w, 1e-9)
        self.team_labels = {t.name: t.label for t in snapshot.teams}
        self._gpu_key: dict[int, int] = {}  # memo key → the memo key of its GPU shape
        self._shapes: dict[Hashable, tuple[Shape, int]] = {}
        self._key_ids: dict[Hashable, int] = {}
        # Pools keeping a share for short requests (reserve.py), by name order.
        reserved = (p for p in snapshot.pools if p.short_reserve_fraction > 0)
        self.reserve_pools = tuple(sorted(reserved, key=lambda p: p.name))
        self.reset_cycle(snapshot.pending)

    def reset_cycle(self, pending: tuple[Request, ...], mix: Collection[Request] = ()) -> None:
        """Begin a cycle over `pending` (FGD's mix counts `mix`, or `pending` when empty): memos,
        shares and reservations empty, as in a new Scheduler."""
        self.snapshot = replace(self.snapshot, pending=pending)
        self.placer.reset_mix(mix or pending)
        self.holds: list[Hold] = []
        self._fail: dict[tuple[int, tuple[int, ...]], tuple[str, WaitCode]] = {}
        self._preempt_fail: set[tuple[int, int, bool, tuple[int, ...]]] = set()
        # Host resources asked by failed preemptions per GPU shape: asking more fails at once.
        self._preempt_fail_host: dict[tuple[int, int, bool, tuple[int, ...]], list[Host]] = {}
        # Refused by a short-request reserve: no reservation (it would keep short work out).
        self._by_reserve: set[tuple[int, tuple[int, ...]]] = set()
        self._blocked: dict[tuple[int, ...], frozenset[int]] = {}  # reserved devices by holds
        self._share: dict[str, float] = {}  # cached DRF shares, dropped when usage changes
        self._member_share: dict[tuple[str, str], float] = {}
        self._charged: set[str] = set()  # teams whose usage changed in this cycle
        self._limits: dict[LimitKey, str | None] = {}  # while usage stays
        self._queue: FairQueue | None = None
        self._planned = False

    # ------------------------------------------------------------------ shares & metrics

    def share(self, team: str) -> float:
        """Weighted dominant share: max over GPU models of used/capacity, over the team weight."""
        hit = self._share.get(team)
        if hit is not None:
            return hit
        value = dominant_share(self.usage.get(team), self.capacity, self.weight.get(team, 1e-9))
        self._share[team] = value
        return value

    def member_share(self, team: str, member: str) -> float:
        """A team member's weighted dominant share (as `share`, with the member's weight)."""
        key = (team, member)
        hit = self._member_share.get(key)
        if hit is None:
            use = self.member_usage.get(key)
            hit = dominant_share(use, self.capacity, self.member_weight.get(key, 1.0))
            self._member_share[key] = hit
        return hit

    def _use(self, team: str, owner: str, model: str, ge: float) -> None:
        """Count `ge` more (or less) of `model` for the team and the member's shares."""
        self.usage[team][model] += ge
        self.member_usage[(team, owner)][model] += ge
        self._share.pop(team, None)
        self._member_share.pop((team, owner), None)
        self._charged.add(team)
        self._limits.clear()

    # ------------------------------------------------------------------ entry points

    def plan(self, now: float) -> Plan:
        """Run one cycle over the snapshot's pending requests (once per Scheduler)."""
        if self._planned:
            raise RuntimeError("a Scheduler plans one cycle per reset_cycle()")
        self._planned = True
        with gc_paused(self.policy.pause_gc):
            return self._plan(now)

    def _queues(self) -> list[tuple[tuple[QueueKey, ...], list[Request]]]:
        """Pending requests split by the queue order that applies to them (`split_by_order`)."""

        def pools_of(req: Request) -> list[str]:
            flavor = self.st.flavors.get(req.flavor)
            shape = self._shape(req, flavor)[0] if flavor else None
            return [g.pool.name for g in self.placer.groups_for(shape)[0]] if shape else []

        return split_by_order(
            self.snapshot.pending, self.policy.queue_order, self.policy.pool_queue_order, pools_of
        )

    def _plan(self, now: float) -> Plan:
        admissions: list[Admission] = []
        preemptions: list[Preemption] = []
        waiting: list[Waiting] = []
        considered = 0
        # Reservations due now start first; the next head in queue order may then hold one.
        due = self._keep_holds(now)
        members = self.member_share if self.policy.fair_share_in_team else None
        aging = self.policy.priority_aging_seconds
        queues = [((), due)] + [(o, [r for r in rs if r not in due]) for o, rs in self._queues()]
        # Borrowers go in a second pass: admitted first, they would hold capacity the next cycle
        # wins back only by preemption.  Those that borrow already and stay borrowers through
        # the first pass skip it: their turn there would decide nothing.
        borrowers: list[list[Request]] = []
        by_quota: list[tuple[float, str, Request, str]] = []  # by age: (submitted_at, id, ...)
        for i, (order, requests) in enumerate(queues):
            split: tuple[list[Request], list[Request]] = ([], [])
            for pending in requests:
                why = self._over_limit(pending)
                if why is not None:
                    by_quota.append((pending.submitted_at, pending.id, pending, why))
                else:
                    split[self._borrows(pending, throughout=True)].append(pending)
            queues[i] = (order, split[0])
            borrowers.append(split[1])
        for lending in (False, True):
            for (order, requests), deferred in zip(queues, borrowers, strict=True):
                queue = FairQueue(
                    deferred if lending else requests, order, self.share, members, now, aging
                )
                self._queue = queue
                while (req := queue.pop()) is not None:
                    if not lending and self._borrows(req):
                        deferred.append(req)
                        continue
                    considered += 1
                    adm, pre, reason, code = self._decide(req, now, allow_reserve=True)
                    preemptions.extend(pre)
                    if adm is not None:
                        admissions.append(adm)
                    elif code == "quota":
                        assert reason is not None
                        by_quota.append((req.submitted_at, req.id, req, reason))
                    else:
                        assert reason is not None and code is not None
                        waiting.append(Waiting(req.id, reason, code, len(waiting) + 1))
        self._queue = None
        # Last, so positions count those waiting for capacity; reasons name usage after the cycle.
        by_quota.sort()
        for _, _, req, why in by_quota:
            if req.team in self._charged:
                why = self._over_limit(req) or why
            waiting.append(Waiting(req.id, why, "quota", len(waiting) + 1))
        held = reservations(self.st, self.holds, self.snapshot.pending)
        return Plan(tuple(admissions), tuple(preemptions), tuple(waiting), held, considered)

    def _borrows(self, req: Request, *, throughout: bool = False) -> bool:
        """Whether admitting `req` now would take its team past its guarantee for the flavor;
        `throughout`: and will still when the first pass reaches it (the team's usage of the
        flavor only grows in that pass unless some of its running work can be preempted)."""
        flavor = self.st.flavors.get(req.flavor)
        if throughout and (flavor is None or (req.team, req.flavor) in self.st.victim_nodes_by_tf):
            return False
        demand = req.gpu_count * flavor.gpu_equivalent if flavor is not None else 0.0
        return not self.ledger.within_guarantee(req.team, req.flavor, demand)

    def _over_limit(self, req: Request) -> str | None:
        """The ledger's reason when a valid request would pass its team's or project's limit."""
        flavor = self.st.flavors.get(req.flavor)
        if flavor is None:
            return None
        key = limit_key(req, flavor)
        why = self._limits.get(key, "")
        if why == "":
            why = self._limits[key] = self.ledger.over_limit(*key)
        if why is None or _invalid(req, flavor.kind, req.mig_profile or flavor.mig_profile):
            return None
        return why

    def _keep_holds(self, now: float) -> list[Request]:
        """Take up the previous cycle's reservations again (backfill.py), earliest start first,
        for requests still valid and within quota; returns those whose start has come."""
        wanted: list[tuple[str, Shape, list[Group]]] = []
        for req in held_requests(self.snapshot.pending) if self.policy.enable_backfill else ():
            flavor = self.st.flavors.get(req.flavor)
            if flavor is None or _invalid(req, flavor.kind, req.mig_profile or flavor.mig_profile):
                continue
            demand = req.gpu_count * flavor.gpu_equivalent
            if self.ledger.check(req.team, req.project, req.flavor, demand)[0]:
                shape = self._shape(req, flavor)[0]
                wanted.append((req.id, shape, self.placer.groups_for(shape)[0]))
        self.holds = keep_holds(self.st, wanted, now, self.policy.max_reservations)
        due = {h.request_id for h in self.holds if h.start_at <= now}
        return [r for r in self.snapshot.pending if r.id in due] if due else []

    def place_one(self, request: Request, now: float) -> Decision:
        """Decide one newly arrived request now, against the indexed state and reservations."""
        self.placer.note(request)
        adm, pre, reason, code = self._decide(request, now, allow_reserve=False)
        return Decision(request.id, adm, tuple(pre), reason, code)

    # ------------------------------------------------------------------ one decision

    def _decide(self, req: Request, now: float, allow_reserve: bool) -> _Outcome:
        flavor = self.st.flavors.get(req.flavor)
        if flavor is None:
            return None, [], f"unknown flavor {req.flavor}", "invalid"
        invalid = _invalid(req, flavor.kind, req.mig_profile or flavor.mig_profile)
        if invalid:
            return None, [], invalid, "invalid"
        demand = req.gpu_count * flavor.gpu_equivalent
        ok, borrowed, why = self.ledger.check(req.team, req.project, req.flavor, demand)
        if not ok:
            assert why is not None
            return None, [], why, "quota"
        shape, mkey = self._shape(req, flavor)
        long_in = self._long_in(req) if self.reserve_pools else ()
        skip = self._reserve_skip(long_in, demand) if long_in else ()
        end = now + req.max_runtime_seconds
        block_ids = tuple(
            i for i, h in enumerate(self.holds) if h.start_at < end and h.request_id != req.id
        )
        blocked = self._blocked.get(block_ids)
        if blocked is None:
            blocked = self._blocked[block_ids] = frozenset(
                d for i in block_ids for d in self.holds[i].devices
            )
        memo: tuple[str, WaitCode] | None = self._fail.get((mkey, ())) or self._fail.get(
            (mkey, block_ids)
        )
        preemptible = req.is_preemptible or borrowed
        if memo is None:
            claims, hit = self.placer.place(shape, blocked, preemptible, skip)
            if claims is not None:
                drop_hold(self.holds, req.id)
                return self._admit(req, demand, borrowed, preemptible, claims, now), [], None, None
            fresh: tuple[str, WaitCode]
            if skip and self.placer.place(shape, blocked, preemptible)[0] is not None:
                # It would fit, but only by eating into a short-request reserve.
                fresh = ("; ".join(reserve_reason(self.st.pools[p]) for p in skip), "capacity")
                self._fail[(mkey, block_ids)] = fresh
                self._by_reserve.add((mkey, block_ids))
            elif hit:
                first = self.holds[block_ids[0]] if block_ids else None
                fresh = (behind_reason(first, now), "reservation")
                self._fail[(mkey, block_ids)] = fresh
            else:
                fresh = (capacity_reason(self.placer, shape), "capacity")
                self._fail[(mkey, ())] = fresh
            memo = fresh
        # Preemption.
        if self.policy.enable_preemption:
            got = self._preempt(
                req, shape, mkey, demand, borrowed, preemptible, blocked, block_ids, now, skip
            )
            if got is not None:
                drop_hold(self.holds, req.id)
                return got
        # A reservation kept from the previous cycle.
        own = hold_of(self.holds, req.id) if self.holds else None
        if own is not None:
            return None, [], f"{memo[0]}; {reserved_reason(self.st, own, now)}", "reserved"
        # Reservation for the head, once it has waited long enough.
        if (
            allow_reserve
            and memo[1] == "capacity"
            and (mkey, block_ids) not in self._by_reserve
            and self.policy.enable_backfill
            and sum(1 for h in self.holds if h.claims) < self.policy.max_reservations
        ):
            due = req.waiting_since() + self.policy.reservation_wait_seconds
            if now < due:
                later = f"capacity is reserved for it from {clock(due, now)} if it still waits"
                return None, [], f"{memo[0]}; {later}", memo[1]
            groups, _ = self.placer.groups_for(shape)
            taken = frozenset(d for h in self.holds for d in h.devices)
            hold = reserve(self.st, req.id, shape, groups, now, taken)
            if hold is not None:
                self.holds.append(hold)
                return None, [], f"{memo[0]}; {reserved_reason(self.st, hold, now)}", "reserved"
        return None, [], memo[0], memo[1]

    def _shape(self, req: Request, flavor: Flavor) -> tuple[Shape, int]:
        """The request's shape and its memo key (cached per distinct request shape).

        The memo key replaces the workload kind by the eligible groups it leads to, so requests
        that differ only in kind but can go to the same pools share failures (and whether they
        are distributed, unless that makes them a gang).
        """
        raw = (*shape_fields(req), self._long_in(req) if self.reserve_pools else ())
        hit = self._shapes.get(raw)
        if hit is None:
            shape = shape_of(req, flavor)
            groups, _ = self.placer.groups_for(shape)
            # `distributed` only matters where it makes a gang.
            spread = bool(groups) and is_gang(shape, min(g.max_devices for g in groups))
            canon_shape = replace(shape, workload_kind="", distributed=spread) if groups else shape
            canon: tuple[object, ...] = (canon_shape, tuple(g.key for g in groups))
            if raw[-1]:
                # Long in some reserved pool: the reserve depends on the demand and on which
                # pools count it as long, so such requests share failures only among themselves.
                canon += (raw[-1], req.gpu_count * flavor.gpu_equivalent)
            key_id = self._key_ids.setdefault(canon, len(self._key_ids))
            gpu_canon = (replace(canon_shape, cpu_millicores=0, host_memory_mib=0), *canon[1:])
            self._gpu_key[key_id] = self._key_ids.setdefault(gpu_canon, len(self._key_ids))
            hit = self._shapes[raw] = (shape, key_id)
        return hit

    def forget_failed_preemptions(self) -> None:
        """Let every shape try preemption again (more work became a possible victim)."""
        self._preempt_fail.clear()
        self._preempt_fail_host.clear()

    def _long_in(self, req: Request) -> tuple[str, ...]:
        """Names of the reserved pools for which `req` is a long request."""
        return tuple(p.name for p in self.reserve_pools if is_long(p, req.max_runtime_seconds))

    def _reserve_skip(self, long_in: tuple[str, ...], demand: float) -> tuple[str, ...]:
        """Pools in `long_in` where taking `demand` now would eat into the short reserve."""
        st = self.st
        return tuple(
            p
            for p in long_in
            if not leaves_reserve(st.pools[p], st.pool_capacity[p], st.pool_used[p], demand)
        )

    def _admit(
        self,
        req: Request,
        demand: float,
        borrowed: bool,
        preemptible: bool,
        claims: tuple[Claim, ...],
        now: float,
    ) -> Admission:
        st = self.st
        nodes = tuple(dict.fromkeys(st.dev_node[c[0]] for c in claims))
        rec = AllocRecord(
            id=req.id,
            team=req.team,
            project=req.project,
            flavor=req.flavor,
            ge=demand,
            priority=req.priority,
            preemptible=preemptible,
            borrowed=borrowed,
            started_at=now,
            end=now + req.max_runtime_seconds,
            exclusive_node=not req.allow_shared_node,
            claims=claims,
            nodes=nodes,
            model=st.node_model[nodes[0]],
            from_snapshot=False,
            cpu_millicores=max(0, req.cpu_millicores),
            memory_mib=max(0, req.memory_mib),
        )
        led = self.ledger
        key = (req.team, req.flavor)
        guaranteed = led.guaranteed.get(key, 0.0) + EPS
        below = led.used[key] <= guaranteed
        st.apply(rec)
        led.charge(req.team, req.project, req.flavor, demand)
        self.owner[req.id] = req.owner
        self._use(req.team, req.owner, rec.model, demand)
        # Rising above its guarantee makes the team's running preemptible work eligible victims.
        if (
            below
            and led.used[key] > guaranteed
            and team_rose_above_guarantee(st, self.placer, req.team, req.flavor)
        ):
            self.forget_failed_preemptions()
        placement = tuple(st.device_claim(c, st.mig_profile_of(req)) for c in claims)
        return Admission(req.id, placement, borrowed, preemptible)

    def _preempt(
        self,
        req: Request,
        shape: Shape,
        mkey: int,
        demand: float,
        borrowed: bool,
        preemptible: bool,
        blocked: frozenset[int],
        block_ids: tuple[int, ...],
        now: float,
        skip: tuple[str, ...] = (),
    ) -> _Outcome | None:
        reclaim = not borrowed
        if req.priority <= 0 and not reclaim:
            return None
        key = (mkey, req.priority, reclaim, block_ids)
        if key in self._preempt_fail:
            return None
        host = (shape.cpu_millicores, shape.host_memory_mib)
        gpu_key = (self._gpu_key[mkey], req.priority, reclaim, block_ids)
        if any(c <= host[0] and m <= host[1] for c, m in self._preempt_fail_host.get(gpu_key, ())):
            return None
        groups, _ = self.placer.groups_for(shape)
        if not groups:
            return None
        if not skip:
            found = find_victims(
                self.st, self.placer, self.ledger, shape, groups, req.priority, reclaim, blocked
            )
        else:
            # Long work whose placement a short-request reserve refused: first the pools whose
            # reserve has room, then the refusing pools, where it may preempt only if the
            # reserve ends up no smaller (kept free afterwards, or the victims free the demand).
            found = None
            open_groups = [g for g in groups if g.pool.name not in skip]
            if open_groups:
                found = find_victims(
                    self.st, self.placer, self.ledger, shape, open_groups, req.priority, reclaim,
                    blocked,
                )  # fmt: skip
            if found is None:
                found = find_victims(
                    self.st, self.placer, self.ledger, shape,
                    [g for g in groups if g.pool.name in skip], req.priority, reclaim, blocked,
                )  # fmt: skip
                if found is not None and not reserve_kept(self.st, found[1], found[0], demand):
                    found = None
        if found is None:
            self._preempt_fail.add(key)
            self._preempt_fail_host.setdefault(gpu_key, []).append(host)
            return None
        claims, victims = found
        out: list[Preemption] = []
        for v in victims:
            self.st.release(v)
            for n in v.nodes:
                lst = self.st.node_victims.get(n)
                if lst is not None and v in lst:
                    lst.remove(v)
            self.ledger.charge(v.team, v.project, v.flavor, -v.ge)
            self._use(v.team, self.owner.get(v.id, ""), v.model, -v.ge)
            if self._queue is not None:
                self._queue.touch(v.team)
            team = self.team_labels.get(req.team, req.team)
            why = preemption_reason(team, req.priority, reclaim, v.priority, v.borrowed)
            out.append(Preemption(v.id, req.id, why))
        # Freed capacity may now fit shapes that failed; failed preemptions stay failed (fewer
        # victims remain, and their teams' usage only went down).
        self._fail.clear()
        self._by_reserve.clear()
        adm = self._admit(req, demand, borrowed, preemptible, claims, now)
        return adm, out, None, None


def _invalid(req: Request, kind: str, profile: str | None) -> str | None:
    if req.gpu_count < 1:
        return "gpu_count must be at least 1"
    if kind == "mig" and (profile is None or profile not in MIG_PROFILES):
        return f"unknown MIG profile {profile}"
    if req.max_runtime_seconds <= 0:
        return "max_runtime_seconds must be positive"
    return None


@contextmanager
def gc_paused(pause: bool) -> Iterator[None]:
    """Pause Python's cyclic garbage collector for a cycle, restoring its previous state.

    A cycle allocates tens of thousands of short-lived objects without reference cycles, which
    otherwise trigger repeated full collections over the whole snapshot.  Reference counting
    still frees everything; collection resumes right after the cycle.
    """
    was_enabled = gc.isenabled()
    if pause and was_enabled:
        gc.disable()
    try:
        yield
    finally:
        if pause and was_enabled:
            gc.enable()


def plan(snapshot: Snapshot, *, now: float, policy: Policy | None = None) -> Plan:
    """Plan one scheduling cycle for `snapshot` at time `now` (epoch seconds)."""
    policy = policy or Policy()
    with gc_paused(policy.pause_gc):
        return Scheduler(snapshot, policy).plan(now)
