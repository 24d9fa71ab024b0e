"""Replay recorded submissions through the planner under a policy, and measure what it does.

`replay(trace, policy=..., change=...)` plays a window of the past again: the fleet as given,
the work running at the start of the window, every submission entering the queue when it was
queued, leaving it when it was withdrawn, and running for its recorded runtime once started.
The planner itself decides (`Scheduler`, the code the live cycle runs); this module only moves
the clock. Pure: no Django, no I/O, no clock of its own.

Event-driven, on the live cycle's beat (`cycle_seconds`, the portal's SCHEDULING_CYCLE_SECONDS):

1. Events are arrivals (queued_at), completions (start + recorded runtime, at most the
   declared maximum), withdrawals (a request cancelled while still waiting) and wake-ups when
   a request's reservation wait (Policy.reservation_wait_seconds) is over.  A priority aging
   step (Policy.priority_aging_seconds) is no event: it takes effect at the next cycle.
2. Cycles run at ticks start + k x cycle_seconds. A tick runs a cycle only when an event fell in
   (previous tick, tick]; a tick with nothing new would plan the same state again and is skipped.
3. At a tick: completions and withdrawals up to the tick apply, arrivals join the queue, then one
   planning cycle over everything waiting. Admitted work starts at the tick; a preempted request
   goes back to the queue with its age (as the live cycle requeues it) until `max_attempts`.

One planner keeps its indexed state from cycle to cycle (replay_scheduler.py) and is brought
back, before each cycle, to the state a fresh `Scheduler` would build from the same fleet; so a
cycle here plans what the live cycle plans (tests/engine/test_replay.py checks it against a
fresh planner each cycle, tests/scheduling/test_replay.py against `run_cycle`).

Figures (`ReplayResult`):

* wait per tier: queued_at to start, p50/p90, by the lowest tier among the request's eligible
  pools; requests never started count with the time they waited until withdrawn or until the
  window closed (a lower bound, so starving work is not hidden);
* utilisation: GPU-equivalents held by running work, integrated over the window, over the
  fleet's schedulable capacity over the window;
* fair-share gap: once a minute while work waits, what runs is handed out again by weighted
  water-filling over each team's running + waiting GE; the largest |holding - fair| of a team,
  in points of the fleet's capacity, averaged over the time work waited;
* preemptions: evictions the planner made;
* stranded GPU-hours: free GE of a pool after a cycle that left work waiting for capacity in
  that pool (it fitted none of it), integrated until the next cycle.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from dataclasses import dataclass, field, replace

from .replay_scheduler import ReplayScheduler, starting_snapshot
from .state import AllocRecord
from .types import (
    Allocation,
    Plan,
    Policy,
    Quota,
    Request,
    Scoring,
    Snapshot,
    Team,
)

ARRIVE, COMPLETE, WITHDRAW, WAKE = 2, 0, 1, 3  # order of events at the same instant
_DRIFT = 1e-9
#: The fair-share gap is measured after the first cycle of every such period (it costs a
#: water-filling over all teams) and held until the next measurement.
FAIR_SHARE_SAMPLE_SECONDS = 60.0


# ----------------------------------------------------------------------------- inputs


@dataclass(frozen=True, slots=True)
class Submission:
    """A recorded request: when it joined the queue, how long it ran, when it was withdrawn.

    `runtime_seconds` None means it never ran in the record; it then runs for its declared
    maximum if the replay starts it. `withdrawn_at` is when it left the queue without starting
    (cancelled, expired); a replay that starts it earlier lets it run.
    """

    request: Request
    queued_at: float
    runtime_seconds: float | None = None
    withdrawn_at: float | None = None


@dataclass(frozen=True, slots=True)
class RunningAtStart:
    """Work already running when the window opens, and when it ended in the record."""

    request: Request
    allocation: Allocation
    ends_at: float | None = None


@dataclass(frozen=True, slots=True)
class Trace:
    """The window to replay. `fleet` gives pools, nodes, devices (as if free), flavors, teams,
    quotas; its allocations and pending are ignored (see `running` and `submissions`)."""

    fleet: Snapshot
    start: float
    end: float
    submissions: tuple[Submission, ...]
    running: tuple[RunningAtStart, ...] = ()


@dataclass(frozen=True, slots=True)
class PolicyChange:
    """What to change before replaying: team weights, quotas (replacing the entry of the same
    team, flavor and project, or added), a pool's short-request reserve or scoring, the score
    list, preemption on or off."""

    team_weights: tuple[tuple[str, float], ...] = ()
    quotas: tuple[Quota, ...] = ()
    short_reserve: tuple[tuple[str, float], ...] = ()
    pool_scoring: tuple[tuple[str, Scoring], ...] = ()
    scores: tuple[tuple[str, float], ...] | None = None
    enable_preemption: bool | None = None

    @property
    def is_empty(self) -> bool:
        return self == PolicyChange()


def apply_change(fleet: Snapshot, policy: Policy, change: PolicyChange) -> tuple[Snapshot, Policy]:
    """The fleet and policy with `change` applied (unknown teams and pools are added/ignored)."""
    weights = dict(change.team_weights)
    teams = tuple(replace(t, weight=weights.pop(t.name, t.weight)) for t in fleet.teams)
    teams += tuple(Team(name=n, cohort=None, weight=w) for n, w in sorted(weights.items()))
    changed = {(q.team, q.flavor, q.project): q for q in change.quotas}
    quotas = tuple(changed.pop((q.team, q.flavor, q.project), q) for q in fleet.quotas)
    quotas += tuple(changed.values())
    reserve = dict(change.short_reserve)
    scoring = dict(change.pool_scoring)
    pools = tuple(
        replace(
            p,
            short_reserve_fraction=reserve.get(p.name, p.short_reserve_fraction),
            scoring=scoring.get(p.name, p.scoring),
        )
        for p in fleet.pools
    )
    if change.scores is not None:
        policy = replace(policy, scores=change.scores)
    if change.enable_preemption is not None:
        policy = replace(policy, enable_preemption=change.enable_preemption)
    return replace(fleet, pools=pools, teams=teams, quotas=quotas), policy


# ----------------------------------------------------------------------------- outputs


@dataclass(frozen=True, slots=True)
class Start:
    """A request the replay started: in which cycle (1-based), when, where, which attempt."""

    request_id: str
    cycle: int
    at: float
    node_ids: tuple[str, ...]
    attempt: int


@dataclass(frozen=True, slots=True)
class TierWaits:
    tier: int
    requests: int
    started: int
    p50_seconds: float
    p90_seconds: float


@dataclass(frozen=True, slots=True)
class ReplayResult:
    start: float
    end: float
    cycles: int
    submitted: int
    started: int
    finished: int
    withdrawn: int
    waiting_at_end: int
    failed: int
    waits: tuple[TierWaits, ...]
    utilisation: float
    fair_share_gap_points: float
    fair_share_worst_team: str
    preemptions: int
    stranded_gpu_hours: float
    capacity_ge: float
    team_wait_p50: tuple[tuple[str, float], ...] = ()
    starts: tuple[Start, ...] = field(default=(), repr=False)
    preempted: tuple[tuple[str, int], ...] = field(default=(), repr=False)

    def summary(self) -> dict[str, object]:
        """The figures as plain values (for JSON and tables)."""
        return {
            "window_seconds": self.end - self.start,
            "cycles": self.cycles,
            "submitted": self.submitted,
            "started": self.started,
            "finished": self.finished,
            "withdrawn": self.withdrawn,
            "waiting_at_end": self.waiting_at_end,
            "failed": self.failed,
            "waits": [
                {
                    "tier": w.tier,
                    "requests": w.requests,
                    "started": w.started,
                    "p50_seconds": round(w.p50_seconds, 1),
                    "p90_seconds": round(w.p90_seconds, 1),
                }
                for w in self.waits
            ],
            "utilisation": round(self.utilisation, 4),
            "fair_share_gap_points": round(self.fair_share_gap_points, 2),
            "fair_share_worst_team": self.fair_share_worst_team,
            "preemptions": self.preemptions,
            "stranded_gpu_hours": round(self.stranded_gpu_hours, 2),
            "capacity_ge": self.capacity_ge,
            "team_wait_p50_seconds": {t: round(w, 1) for t, w in self.team_wait_p50},
        }


def _percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


def water_fill(
    demand: dict[str, float], weight: dict[str, float], total: float
) -> dict[str, float]:
    """Hand `total` out in proportion to `weight`, nobody above its `demand` (max-min fair)."""
    fair = dict.fromkeys(demand, 0.0)
    left = total
    open_ = {t for t in demand if demand[t] > 0}
    while left > _DRIFT and open_:
        w_sum = sum(weight[t] for t in open_)
        capped = {t for t in open_ if demand[t] - fair[t] <= left * weight[t] / w_sum + _DRIFT}
        if not capped:
            for t in open_:
                fair[t] += left * weight[t] / w_sum
            break
        for t in capped:
            left -= demand[t] - fair[t]
            fair[t] = demand[t]
        open_ -= capped
    return fair


def replay(
    trace: Trace,
    *,
    policy: Policy | None = None,
    change: PolicyChange | None = None,
    cycle_seconds: float = 10.0,
    max_attempts: int = 3,
) -> ReplayResult:
    """Replay `trace` under `policy` changed by `change`; see the module docstring."""
    fleet, pol = trace.fleet, policy or Policy()
    if change is not None:
        fleet, pol = apply_change(fleet, pol, change)
    start, end = trace.start, trace.end
    sched = ReplayScheduler(starting_snapshot(fleet, (r.allocation for r in trace.running)), pol)
    st = sched.st

    # Capacity per pool (GE, schedulable cards) and what running work holds there.
    capacity: dict[str, float] = defaultdict(float)
    for d in range(len(st.dev_node)):
        node = st.dev_node[d]
        if st.node_schedulable[node]:
            capacity[st.node_pool[node]] += 1.0
    capacity_ge = sum(capacity.values())
    used: dict[str, float] = defaultdict(float)
    for rec in st.allocs.values():
        used[st.node_pool[rec.nodes[0]]] += rec.ge

    requests: dict[str, Request] = {}
    queued_at: dict[str, float] = {}
    runtime: dict[str, float] = {}
    attempt: dict[str, int] = {}
    tier_of: dict[str, int] = {}
    pools_of: dict[str, tuple[str, ...]] = {}
    ge_of: dict[str, float] = {}
    events: list[tuple[float, int, int, str, int]] = []  # (time, kind, seq, request, attempt)
    seq = 0

    def push(at: float, kind: int, rid: str, att: int = 0) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (at, kind, seq, rid, att))

    def learn(req: Request) -> None:
        requests[req.id] = req
        pools = sched.eligible_pools(req)
        pools_of[req.id] = pools
        tier_of[req.id] = min((st.pools[p].tier for p in pools), default=-1)
        flavor = st.flavors.get(req.flavor)
        ge_of[req.id] = req.gpu_count * (flavor.gpu_equivalent if flavor else 0.0)

    for run in trace.running:
        learn(run.request)
        attempt[run.request.id] = 1
        total = (run.ends_at or end) - run.allocation.started_at
        runtime[run.request.id] = min(max(total, 0.0), run.request.max_runtime_seconds)
        if run.ends_at is not None:
            push(max(run.ends_at, start), COMPLETE, run.request.id, 1)
    withdrawn_at: dict[str, float] = {}
    for sub in trace.submissions:
        queued_at[sub.request.id] = max(sub.queued_at, start)
        req = replace(sub.request, queued_at=queued_at[sub.request.id], reserved_start_at=None)
        learn(req)
        declared = req.max_runtime_seconds
        runtime[req.id] = min(sub.runtime_seconds, declared) if sub.runtime_seconds else declared
        attempt[req.id] = 0
        push(queued_at[req.id], ARRIVE, req.id)
        if pol.reservation_wait_seconds > 0:  # a cycle when it may first hold a reservation
            push(queued_at[req.id] + pol.reservation_wait_seconds, WAKE, req.id)
        if sub.withdrawn_at is not None:
            withdrawn_at[req.id] = sub.withdrawn_at
            push(max(sub.withdrawn_at, start), WITHDRAW, req.id)

    pending: dict[str, Request] = {}
    placed: dict[str, AllocRecord] = {}  # running work, by request
    for run in trace.running:
        found = sched.record(run.request.id)
        if found is not None:
            placed[found.id] = found
    holding: dict[str, float] = defaultdict(float)  # GE running per team
    for running_rec in placed.values():
        holding[running_rec.team] += running_rec.ge
    asking: dict[str, float] = defaultdict(float)  # GE waiting per team
    weight = {t: sched.weight.get(t, 1e-9) for t in sched.weight}
    team_gap: dict[str, float] = defaultdict(float)  # gap-seconds per team, in GE
    starts: list[Start] = []
    preempted: list[tuple[str, int]] = []
    finished = withdrawn = failed = cycles = 0
    gauge = {
        "used": sum(used.values()),
        "gap_max": 0.0,
        "gaps_since": start,
        "at": start,
        "ge_seconds": 0.0,
        "stranded": 0.0,
        "stranded_rate": 0.0,
        "gap": 0.0,
        "contended": 0.0,
    }
    gap_now: dict[str, float] = {}

    def advance(to: float) -> None:
        dt = to - gauge["at"]
        if dt > 0:
            gauge["ge_seconds"] += gauge["used"] * dt
            gauge["stranded"] += gauge["stranded_rate"] * dt
            if gap_now:
                gauge["gap"] += gauge["gap_max"] * dt
                gauge["contended"] += dt
            gauge["at"] = to

    def hold_gaps(at: float) -> None:
        """Add the held per-team gaps up to `at` (they change once per sample)."""
        dt = at - gauge["gaps_since"]
        for team, g in gap_now.items():
            team_gap[team] += g * dt
        gauge["gaps_since"] = at

    def stop(rec: AllocRecord) -> None:
        placed.pop(rec.id, None)
        used[st.node_pool[rec.nodes[0]]] -= rec.ge
        gauge["used"] -= rec.ge
        holding[rec.team] -= rec.ge

    next_k = 0
    next_fair_at = start
    while events and events[0][0] <= end:
        k = max(next_k, math.ceil((events[0][0] - start) / cycle_seconds - 1e-9))
        tick = start + k * cycle_seconds
        if tick > end:
            break
        next_k = k + 1
        # 1. Events up to the tick, in time order.
        while events and events[0][0] <= tick:
            at, kind, _, rid, att = heapq.heappop(events)
            if kind == COMPLETE:
                done = placed.get(rid)
                if done is None or attempt[rid] != att:
                    continue  # preempted meanwhile
                advance(at)
                stop(done)
                sched.finish(done)
                finished += 1
            elif kind == WAKE:
                continue  # only a cycle at this tick
            elif kind == WITHDRAW:
                if pending.pop(rid, None) is not None:
                    withdrawn += 1
                    asking[requests[rid].team] -= ge_of[rid]
            elif (
                rid not in placed
                and rid not in pending
                and not (rid in withdrawn_at and withdrawn_at[rid] <= at)
            ):
                pending[rid] = requests[rid]
                asking[requests[rid].team] += ge_of[rid]
        advance(tick)
        # 2. One planning cycle over everything waiting.
        cycles += 1
        sched.begin_cycle(tuple(pending.values()))
        plan: Plan = sched.plan(tick)
        # 3. Apply its outcome: the planner already released the victims and placed the admitted.
        #    Reservations carry over to the next cycle, as the live cycle stores them.
        held = {r.request_id: r.start_at for r in plan.reservations}
        for rid, waiting_req in pending.items():
            if waiting_req.reserved_start_at != held.get(rid):
                pending[rid] = replace(waiting_req, reserved_start_at=held.get(rid))
        for pre in plan.preemptions:
            rid = pre.victim_id
            victim = placed[rid]
            preempted.append((rid, cycles))
            stop(victim)
            sched.after_preemption(victim)
            if attempt[rid] >= max_attempts:
                failed += 1
            else:
                pending[rid] = requests[rid]
                asking[victim.team] += ge_of[rid]
                push(tick + cycle_seconds, ARRIVE, rid)  # considered again next tick
        for adm in plan.admissions:
            rid = adm.request_id
            pending.pop(rid, None)
            attempt[rid] += 1
            new = sched.record(rid)
            assert new is not None
            placed[rid] = new
            asking[new.team] -= new.ge
            holding[new.team] += new.ge
            used[st.node_pool[new.nodes[0]]] += new.ge
            gauge["used"] += new.ge
            sched.touched(new)
            starts.append(Start(rid, cycles, tick, adm.node_ids, attempt[rid]))
            push(tick + runtime[rid], COMPLETE, rid, attempt[rid])
        # 4. Stranded: free GE of pools where work still waits for capacity.
        short_of: set[str] = set()
        for w in plan.waiting:
            if w.code in ("capacity", "reservation", "reserved"):
                short_of.update(pools_of.get(w.request_id, ()))
        gauge["stranded_rate"] = sum(max(0.0, capacity[p] - used[p]) for p in short_of)
        # 5. Fair share now: what runs, handed out again by weight over running + waiting GE.
        if tick >= next_fair_at:
            next_fair_at = tick + FAIR_SHARE_SAMPLE_SECONDS
            hold_gaps(tick)
            gap_now.clear()
            if pending:
                want = {t: holding[t] + asking[t] for t in holding.keys() | asking.keys()}
                want = {t: v for t, v in want.items() if v > _DRIFT}
                share = {t: weight.get(t, 1e-9) for t in want}
                fair = water_fill(want, share, sum(holding.values()))
                gap_now.update({t: abs(holding[t] - fair[t]) for t in want})
                gauge["gap_max"] = max(gap_now.values(), default=0.0)
    advance(end)
    hold_gaps(end)

    # Waits per tier; requests never started count until withdrawn or the window closed.
    first_start: dict[str, float] = {}
    for s in starts:
        first_start.setdefault(s.request_id, s.at)
    by_tier: dict[int, list[float]] = defaultdict(list)
    by_team: dict[str, list[float]] = defaultdict(list)
    started_by_tier: dict[int, int] = defaultdict(int)
    for sub in trace.submissions:
        rid = sub.request.id
        t0 = queued_at[rid]
        if rid in first_start:
            wait = first_start[rid] - t0
            started_by_tier[tier_of[rid]] += 1
        else:
            wait = max(0.0, min(withdrawn_at.get(rid, end), end) - t0)
        by_tier[tier_of[rid]].append(wait)
        by_team[sub.request.team].append(wait)
    waits = tuple(
        TierWaits(
            tier=tier,
            requests=len(values),
            started=started_by_tier[tier],
            p50_seconds=_percentile(values, 0.5),
            p90_seconds=_percentile(values, 0.9),
        )
        for tier, values in sorted(by_tier.items())
    )

    window = max(end - start, 1e-9)
    worst = max(sorted(team_gap), key=lambda t: team_gap[t], default="")
    return ReplayResult(
        start=start,
        end=end,
        cycles=cycles,
        submitted=len(trace.submissions),
        started=len(first_start),
        finished=finished,
        withdrawn=withdrawn,
        waiting_at_end=len(pending),
        failed=failed,
        waits=waits,
        utilisation=gauge["ge_seconds"] / (capacity_ge * window) if capacity_ge else 0.0,
        fair_share_gap_points=(
            gauge["gap"] / gauge["contended"] / capacity_ge * 100 if gauge["contended"] else 0.0
        ),
        team_wait_p50=tuple(
            (team, _percentile(values, 0.5)) for team, values in sorted(by_team.items())
        ),
        fair_share_worst_team=worst,
        preemptions=len(preempted),
        stranded_gpu_hours=gauge["stranded"] / 3600,
        capacity_ge=capacity_ge,
        starts=tuple(starts),
        preempted=tuple(preempted),
    )
