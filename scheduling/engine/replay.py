"""Replay recorded submissions through the planner under a policy, and measure what it does.

`replay(trace, policy=..., change=...)` plays a window of the past again: the fleet as given,
the work running at the start of the window, every submission entering the queue when it was
queued, leaving it when it was withdrawn, and running for its recorded runtime once started.
The planner itself decides; the simulation loop (simulate.py, shared with the forecast) moves
the clock. Pure: no Django, no I/O, no clock of its own.

The events it feeds the loop, on the live cycle's beat (`cycle_seconds`, the portal's
SCHEDULING_CYCLE_SECONDS): arrivals (queued_at), completions (start + recorded runtime, at most
the declared maximum), withdrawals (a request cancelled while still waiting) and wake-ups when a
request's reservation wait (Policy.reservation_wait_seconds) is over. A priority aging step
(Policy.priority_aging_seconds) is no event: it takes effect at the next cycle. A preempted
request goes back to the queue with its age (as the live cycle requeues it) until
`max_attempts`.

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
  that pool (it fitted none of it), integrated until the next cycle. A pool counts for a request
  only if the request could run there on an empty node (`RollingScheduler.eligible_pools`): the
  free cards of 4-card nodes are not stranded by an 8-card job that no node of theirs can hold.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from .simulate import DRIFT, Observer, Simulation, Start, starting_snapshot
from .state import AllocRecord
from .types import Allocation, Plan, Policy, Quota, Request, Scoring, Snapshot, Team

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
    while left > DRIFT and open_:
        w_sum = sum(weight[t] for t in open_)
        capped = {t for t in open_ if demand[t] - fair[t] <= left * weight[t] / w_sum + DRIFT}
        if not capped:
            for t in open_:
                fair[t] += left * weight[t] / w_sum
            break
        for t in capped:
            left -= demand[t] - fair[t]
            fair[t] = demand[t]
        open_ -= capped
    return fair


class _Gauges(Observer):
    """The replay's time-weighted figures, kept as the simulation moves (see the docstring)."""

    def __init__(self, sim: Simulation, start: float, pools_of: dict[str, tuple[str, ...]]) -> None:
        st = sim.sched.st
        self.pools_of = pools_of
        self.node_pool = st.node_pool
        # Capacity per pool (GE, schedulable cards) and what running work holds there.
        self.capacity: dict[str, float] = defaultdict(float)
        for d in range(len(st.dev_node)):
            node = st.dev_node[d]
            if st.node_schedulable[node]:
                self.capacity[st.node_pool[node]] += 1.0
        self.used: dict[str, float] = defaultdict(float)
        self.holding: dict[str, float] = defaultdict(float)  # GE running per team
        # GE each waiting request asks, per team, in queue order (summed once a minute).
        self.asking: dict[str, dict[str, float]] = defaultdict(dict)
        for rec in sim.placed.values():
            self.used[st.node_pool[rec.nodes[0]]] += rec.ge
            self.holding[rec.team] += rec.ge
        self.used_ge = sum(self.used.values())
        self.weight = dict(sim.sched.weight)
        self.ge_of = {
            rid: r.gpu_count * (f.gpu_equivalent if (f := st.flavors.get(r.flavor)) else 0.0)
            for rid, r in sim.requests.items()
        }
        self.team_gap: dict[str, float] = defaultdict(float)  # gap-seconds per team, in GE
        self.gap_now: dict[str, float] = {}
        self.at = self.gaps_since = self.next_fair_at = start
        self.ge_seconds = self.stranded = self.stranded_rate = 0.0
        self.gap = self.gap_max = self.contended = 0.0

    def advance(self, at: float) -> None:
        dt = at - self.at
        if dt > 0:
            self.ge_seconds += self.used_ge * dt
            self.stranded += self.stranded_rate * dt
            if self.gap_now:
                self.gap += self.gap_max * dt
                self.contended += dt
            self.at = at

    def hold_gaps(self, at: float) -> None:
        """Add the held per-team gaps up to `at` (they change once per sample)."""
        dt = at - self.gaps_since
        for team, g in self.gap_now.items():
            self.team_gap[team] += g * dt
        self.gaps_since = at

    def started(self, rec: AllocRecord) -> None:
        self._hold(rec, rec.ge)

    def stopped(self, rec: AllocRecord) -> None:
        self._hold(rec, -rec.ge)

    def queued(self, request: Request) -> None:
        self.asking[request.team][request.id] = self.ge_of[request.id]

    def left_queue(self, request: Request) -> None:
        del self.asking[request.team][request.id]

    def _hold(self, rec: AllocRecord, ge: float) -> None:
        self.used[self.node_pool[rec.nodes[0]]] += ge
        self.used_ge += ge
        self.holding[rec.team] += ge

    def cycled(self, tick: float, plan: Plan, pending: Mapping[str, Request]) -> None:
        # Stranded: free GE of pools where work still waits for capacity.
        short_of: set[str] = set()
        for w in plan.waiting:
            if w.code in ("capacity", "reservation", "reserved"):
                short_of.update(self.pools_of.get(w.request_id, ()))
        self.stranded_rate = sum(max(0.0, self.capacity[p] - self.used[p]) for p in short_of)
        # Fair share now: what runs, handed out again by weight over running + waiting GE.
        if tick < self.next_fair_at:
            return
        self.next_fair_at = tick + FAIR_SHARE_SAMPLE_SECONDS
        self.hold_gaps(tick)
        self.gap_now.clear()
        if pending:
            holding = self.holding
            asking = {t: sum(waiting.values()) for t, waiting in self.asking.items() if waiting}
            want = {t: holding[t] + asking.get(t, 0.0) for t in holding.keys() | asking.keys()}
            want = {t: v for t, v in want.items() if v > DRIFT}
            share = {t: self.weight.get(t, 1e-9) for t in want}
            fair = water_fill(want, share, sum(holding.values()))
            self.gap_now.update({t: abs(holding[t] - fair[t]) for t in want})
            self.gap_max = max(self.gap_now.values(), default=0.0)


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
    running = starting_snapshot(fleet, (r.allocation for r in trace.running))
    sim = Simulation(running, pol, max_attempts=max_attempts)
    for run in trace.running:
        total = (run.ends_at or end) - run.allocation.started_at
        runtime = min(max(total, 0.0), run.request.max_runtime_seconds)
        ends_at = max(run.ends_at, start) if run.ends_at is not None else None
        sim.running_until(run.request.id, ends_at, request=run.request, runtime_seconds=runtime)
    for sub in trace.submissions:
        req, queued_at = sub.request, max(sub.queued_at, start)
        if req.waiting_since() != queued_at or req.reserved_start_at is not None:
            req = replace(req, queued_at=queued_at, reserved_start_at=None)
        declared = req.max_runtime_seconds
        runtime = min(sub.runtime_seconds, declared) if sub.runtime_seconds else declared
        sim.arrive(req, req.waiting_since(), runtime_seconds=runtime)
        if pol.reservation_wait_seconds > 0:  # a cycle when it may first hold a reservation
            sim.wake(req.waiting_since() + pol.reservation_wait_seconds)
        if sub.withdrawn_at is not None:
            sim.withdraw(req.id, max(sub.withdrawn_at, start))
    st = sim.sched.st
    pools_of = {rid: sim.sched.eligible_pools(r) for rid, r in sim.requests.items()}
    tier_of = {
        rid: min((st.pools[p].tier for p in pools), default=-1) for rid, pools in pools_of.items()
    }
    gauges = _Gauges(sim, start, pools_of)
    sim.observer = gauges
    sim.run(origin=start, until=end, cycle_seconds=cycle_seconds)
    gauges.advance(end)
    gauges.hold_gaps(end)
    capacity_ge = sum(gauges.capacity.values())

    # Waits per tier; requests never started count until withdrawn or the window closed.
    first_start: dict[str, float] = {}
    for s in sim.starts:
        first_start.setdefault(s.request_id, s.at)
    by_tier: dict[int, list[float]] = defaultdict(list)
    by_team: dict[str, list[float]] = defaultdict(list)
    started_by_tier: dict[int, int] = defaultdict(int)
    for sub in trace.submissions:
        rid = sub.request.id
        t0 = sim.requests[rid].waiting_since()
        if rid in first_start:
            wait = first_start[rid] - t0
            started_by_tier[tier_of[rid]] += 1
        else:
            wait = max(0.0, min(sim.withdrawn_at.get(rid, end), end) - t0)
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
    team_gap = gauges.team_gap
    worst = max(sorted(team_gap), key=lambda t: team_gap[t], default="")
    return ReplayResult(
        start=start,
        end=end,
        cycles=sim.cycles,
        submitted=len(trace.submissions),
        started=len(first_start),
        finished=sim.finished,
        withdrawn=sim.withdrawn,
        waiting_at_end=len(sim.pending),
        failed=sim.failed,
        waits=waits,
        utilisation=gauges.ge_seconds / (capacity_ge * window) if capacity_ge else 0.0,
        fair_share_gap_points=(
            gauges.gap / gauges.contended / capacity_ge * 100 if gauges.contended else 0.0
        ),
        team_wait_p50=tuple(
            (team, _percentile(values, 0.5)) for team, values in sorted(by_team.items())
        ),
        fair_share_worst_team=worst,
        preemptions=len(sim.preempted),
        stranded_gpu_hours=gauges.stranded / 3600,
        capacity_ge=capacity_ge,
        starts=tuple(sim.starts),
        preempted=tuple(sim.preempted),
    )
