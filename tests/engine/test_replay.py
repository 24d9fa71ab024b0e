"""The replay plans what a fresh planner plans each cycle, and its figures move as policy does."""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from scheduling.engine.planner import plan
from scheduling.engine.replay import (
    PolicyChange,
    RunningAtStart,
    Submission,
    Trace,
    apply_change,
    replay,
    water_fill,
)
from scheduling.engine.simulate import Observer, Simulation, starting_snapshot
from scheduling.engine.types import Allocation, DeviceClaim, Plan, Policy, Quota, Request, Team
from tests.engine.builders import FLAVOR, MEM, alloc, fleet, node, req, whole_claims

CYCLE = 10.0


def reference(
    trace: Trace, policy: Policy, max_attempts: int = 3
) -> list[tuple[str, float, tuple[str, ...]]]:
    """Starts (request, tick, nodes) of a replay that builds a new snapshot and plans it from
    scratch every cycle, as the live cycle does: the oracle for `replay`."""
    requests: dict[str, Request] = {}
    runtime: dict[str, float] = {}
    events: list[tuple[float, int, int, str, int]] = []
    attempt: dict[str, int] = {}
    running: dict[str, RunningAtStart] = {}
    for i, run in enumerate(trace.running):
        rid = run.request.id
        requests[rid], attempt[rid], running[rid] = run.request, 1, run
        ran = (run.ends_at or trace.end) - run.allocation.started_at
        runtime[rid] = min(ran, run.request.max_runtime_seconds)
        if run.ends_at is not None:
            heapq.heappush(events, (run.ends_at, 0, i, rid, 1))
    withdrawn: dict[str, float] = {}
    for i, sub in enumerate(trace.submissions):
        rid = sub.request.id
        requests[rid], attempt[rid] = sub.request, 0
        declared = sub.request.max_runtime_seconds
        runtime[rid] = min(sub.runtime_seconds, declared) if sub.runtime_seconds else declared
        heapq.heappush(events, (max(sub.queued_at, trace.start), 2, 10_000 + i, rid, 0))
        if sub.withdrawn_at is not None:
            withdrawn[rid] = sub.withdrawn_at
            heapq.heappush(events, (sub.withdrawn_at, 1, 20_000 + i, rid, 0))
    pending: dict[str, Request] = {}
    starts: list[tuple[str, float, tuple[str, ...]]] = []
    next_k, seq = 0, 30_000
    while events and events[0][0] <= trace.end:
        k = max(next_k, math.ceil((events[0][0] - trace.start) / CYCLE - 1e-9))
        tick = trace.start + k * CYCLE
        if tick > trace.end:
            break
        next_k = k + 1
        while events and events[0][0] <= tick:
            at, kind, _, rid, att = heapq.heappop(events)
            if kind == 0 and rid in running and attempt[rid] == att:
                del running[rid]
            elif kind == 1:
                pending.pop(rid, None)
            elif kind == 2 and rid not in running and not withdrawn.get(rid, math.inf) <= at:
                pending[rid] = requests[rid]
        snap = replace(
            starting_snapshot(trace.fleet, (r.allocation for r in running.values())),
            pending=tuple(pending.values()),
        )
        result = plan(snap, now=tick, policy=policy)
        for pre in result.preemptions:
            del running[pre.victim_id]
            if attempt[pre.victim_id] < max_attempts:
                pending[pre.victim_id] = requests[pre.victim_id]
                seq += 1
                heapq.heappush(events, (tick + CYCLE, 2, seq, pre.victim_id, 0))
        for adm in result.admissions:
            rid = adm.request_id
            r = pending.pop(rid)
            attempt[rid] += 1
            running[rid] = RunningAtStart(
                r,
                Allocation(
                    request_id=rid,
                    team=r.team,
                    flavor=r.flavor,
                    gpu_equivalents=r.gpu_count * FLAVOR[r.flavor].gpu_equivalent,
                    placement=adm.placement,
                    started_at=tick,
                    max_runtime_seconds=r.max_runtime_seconds,
                    project=r.project,
                    priority=r.priority,
                    preemptible=adm.preemptible,
                    borrowed=adm.borrowed,
                    exclusive_node=not r.allow_shared_node,
                ),
            )
            starts.append((rid, tick, adm.node_ids))
            seq += 1
            heapq.heappush(events, (tick + runtime[rid], 0, seq, rid, attempt[rid]))
        # The portal stores each reservation's start on its request for the next cycle.
        held = {r.request_id: r.start_at for r in result.reservations}
        for rid, waiting in pending.items():
            pending[rid] = replace(waiting, reserved_start_at=held.get(rid))
    return starts


FLAVOR_IDS = ("gpu", "v20", "v40", "m1", "m3")
PLACERS: tuple[Literal["plugins", "fgd"], ...] = ("plugins", "fgd")
submission = hs.tuples(
    hs.sampled_from(FLAVOR_IDS),
    hs.integers(0, 2),  # team
    hs.integers(1, 4),  # priority
    hs.booleans(),  # preemptible
    hs.integers(1, 3),  # gpu count (whole cards)
    hs.integers(0, 3600),  # queued at
    hs.integers(60, 5400),  # runtime
    hs.booleans(),  # shared node allowed
)


def _trace(subs: list[tuple[str, int, int, bool, int, int, int, bool]], tight: bool) -> Trace:
    teams = tuple(Team(f"t{i}", cohort="org") for i in range(3))
    quotas = tuple(
        Quota(t.name, f, 6.0 if tight else 50.0, 16.0 if tight else 50.0)
        for t in teams
        for f in FLAVOR_IDS
    )
    snap = fleet(
        node("n0", gpus=4),
        node("n1", gpus=4),
        node("n2", gpus=8),
        node("v0", pool="vgpu", gpus=2),
        node("m0", pool="mig", gpus=2),
        teams=teams,
        quotas=quotas,
    )
    out = []
    for i, (flavor, team, prio, pre, count, at, run, shared) in enumerate(subs):
        r = req(
            f"r{i:03d}",
            flavor,
            team=f"t{team}",
            priority=prio,
            is_preemptible=pre,
            gpu_count=count if flavor == "gpu" else 1,
            submitted_at=float(at),
            max_runtime_seconds=float(run + 600 * (i % 3)),
            allow_shared_node=shared or flavor != "gpu",
        )
        out.append(Submission(r, float(at), float(run), float(at + 900) if i % 7 == 3 else None))
    running_req = req("run0", "gpu", team="t0", priority=1, is_preemptible=True)
    running = RunningAtStart(
        running_req,
        alloc("run0", whole_claims("n2", [0, 1]), team="t0", priority=1, preemptible=True),
        ends_at=1800.0,
    )
    return Trace(snap, 0.0, 3 * 3600.0, tuple(out), (running,))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hs.lists(submission, min_size=1, max_size=40), hs.booleans(), hs.sampled_from(PLACERS))
def test_replay_starts_what_a_fresh_planner_starts_every_cycle(
    subs: list[tuple[str, int, int, bool, int, int, int, bool]],
    tight: bool,
    placer: Literal["plugins", "fgd"],
) -> None:
    trace = _trace(subs, tight)
    policy = Policy(placer=placer)
    got = replay(trace, policy=policy, cycle_seconds=CYCLE)
    assert [(s.request_id, s.at, s.node_ids) for s in got.starts] == reference(trace, policy)


def _preempting_subs() -> list[tuple[str, int, int, bool, int, int, int, bool]]:
    """Low-priority preemptible work of t0 fills the whole cards; urgent work of t1 and t2
    arrives while it runs."""
    low = [("gpu", 0, 1, True, 2, 10 * i, 5000, True) for i in range(10)]
    urgent = [("gpu", 1 + i % 2, 3, False, 1 + i % 2, 600 + 120 * i, 900, True) for i in range(12)]
    return low + urgent


def test_replay_matches_the_fresh_planner_with_preemptions() -> None:
    trace = _trace(_preempting_subs(), tight=True)
    got = replay(trace, cycle_seconds=CYCLE)
    assert got.preemptions > 0
    assert [(s.request_id, s.at, s.node_ids) for s in got.starts] == reference(trace, Policy())


def _over_limit_trace() -> Trace:
    """Team a may run two cards and queues twelve ten-minute jobs at once on an idle fleet;
    team b's work arrives beside it, a job a minute."""
    teams = (Team("a", "c"), Team("b", "c"))
    quotas = (Quota("a", "gpu", 2.0, 2.0), Quota("b", "gpu", 4.0, 8.0))
    snap = fleet(node("n1", gpus=8), node("n2", gpus=8), teams=teams, quotas=quotas)
    subs = [
        Submission(req(f"a{i:02d}", submitted_at=0.0, max_runtime_seconds=600.0), 0.0, 600.0)
        for i in range(12)
    ]
    subs += [
        Submission(
            req(f"b{i:02d}", team="b", submitted_at=60.0 * i, max_runtime_seconds=900.0),
            60.0 * i,
            300.0 + 30 * i,
        )
        for i in range(12)
    ]
    return Trace(snap, 0.0, 4 * 3600.0, tuple(subs))


class _Listed(Observer):
    """Per cycle: (tick, requests the plan lists as waiting, team a's requests waiting)."""

    def __init__(self) -> None:
        self.cycles: list[tuple[float, int, int]] = []

    def cycled(self, tick: float, plan: Plan, pending: Mapping[str, Request]) -> None:
        waiting_a = sum(r.team == "a" for r in pending.values())
        self.cycles.append((tick, len(plan.waiting), waiting_a))


def test_requests_past_their_limit_wait_aside_until_their_team_frees_quota() -> None:
    trace = _over_limit_trace()
    got = replay(trace, cycle_seconds=CYCLE)
    assert [(s.request_id, s.at, s.node_ids) for s in got.starts] == reference(trace, Policy())
    # Two at a time, each pair as the previous one ends.
    assert sorted(s.at for s in got.starts if s.request_id[0] == "a") == [
        600.0 * (i // 2) for i in range(12)
    ]
    listed = _Listed()
    sim = Simulation(trace.fleet, Policy(), observer=listed)
    for sub in trace.submissions:
        sim.arrive(sub.request, sub.queued_at, runtime_seconds=sub.runtime_seconds or 0.0)
    sim.run(origin=0.0, cycle_seconds=CYCLE)
    # The first cycle lists team a's ten quota waits; while its work runs, the cycles for team
    # b's arrivals plan without them; when a pair ends, the rest are planned (and listed) again.
    assert listed.cycles[0] == (0.0, 10, 10)
    assert (60.0, 0, 10) in listed.cycles
    assert (600.0, 8, 8) in listed.cycles


def _lapsing_reservation_trace(cycle_between: bool) -> Trace:
    """Team a's 4-card job holds a reservation on n1 from 2000 s, when b's 3-card job ends.
    At 700 s a's urgent 1-card job takes the free card for 100 s, putting the 4-card job past
    a's limit until 800 s; then c's long urgent job wants the free card. Kept, the reservation
    keeps c off it; lapsed (a cycle saw a past its limit in between), c takes it."""
    teams = (Team("a", "o"), Team("b", "o"), Team("c", "o"))
    quotas = tuple(Quota(t.name, f, 4.0, 4.0) for t in teams for f in ("gpu", "v20"))
    snap = fleet(node("n1", gpus=4), node("v0", pool="vgpu", gpus=1), teams=teams, quotas=quotas)
    busy = RunningAtStart(
        req("x", team="b", gpu_count=3),
        alloc("x", whole_claims("n1", [0, 1, 2]), team="b"),
        ends_at=2000.0,
    )
    on_n1 = ("excl",)
    subs = [
        Submission(req("a-big", gpu_count=4, pools=on_n1, max_runtime_seconds=3600.0), 0.0, 600.0),
        Submission(
            req("a-small", pools=on_n1, submitted_at=700.0, priority=3, max_runtime_seconds=100.0),
            700.0,
            100.0,
        ),
        Submission(
            req("c-long", team="c", pools=on_n1, submitted_at=800.0, priority=3),
            800.0,
            5000.0,
        ),
    ]
    if cycle_between:
        subs.append(Submission(req("b-v", "v20", team="b", submitted_at=750.0), 750.0, 60.0))
    return Trace(snap, 0.0, 4 * 3600.0, tuple(subs), (busy,))


@pytest.mark.parametrize("cycle_between", [False, True])
def test_a_reservation_lapses_when_a_cycle_sees_its_request_past_the_limit(
    cycle_between: bool,
) -> None:
    trace = _lapsing_reservation_trace(cycle_between)
    got = replay(trace, cycle_seconds=CYCLE)
    assert [(s.request_id, s.at, s.node_ids) for s in got.starts] == reference(trace, Policy())
    c_start = next(s.at for s in got.starts if s.request_id == "c-long")
    assert c_start == (800.0 if cycle_between else 2600.0)


def _quarter_share(rid: str, team: str, pct: int, at: float) -> Request:
    return req(
        rid, "v20", team=team, vgpu_memory_mib=MEM * pct // 100, vgpu_cores_percent=pct,
        submitted_at=at,
    )  # fmt: skip


def test_fgd_counts_the_requests_waiting_past_their_limit_in_its_mix() -> None:
    """Team b has no quota for shares: its twenty quarter shares wait aside for good. They are
    still the queue FGD packs for, so a's quarter share goes to the card whose half free is
    left usable by a quarter, not to the card where it leaves a 5 % sliver."""
    teams = (Team("a", "o"), Team("b", "o"), Team("c", "o"))
    quotas = (Quota("a", "v20", 4.0, 4.0), Quota("c", "v20", 4.0, 4.0))
    snap = fleet(node("n1", "vgpu", gpus=1), node("n2", "vgpu", gpus=1), teams=teams, quotas=quotas)

    def held(rid: str, node_id: str, pct: int) -> RunningAtStart:
        share = DeviceClaim(node_id, 0, False, MEM * pct // 100, pct)
        return RunningAtStart(
            _quarter_share(rid, "c", pct, 0.0), alloc(rid, [share], "v20", team="c")
        )

    subs = [Submission(_quarter_share(f"b{i}", "b", 25, 0.0), 0.0, 600.0) for i in range(20)]
    subs.append(Submission(_quarter_share("q", "a", 25, 100.0), 100.0, 600.0))
    trace = Trace(snap, 0.0, 3600.0, tuple(subs), (held("c1", "n1", 70), held("c2", "n2", 50)))
    policy = Policy(placer="fgd")
    got = replay(trace, policy=policy, cycle_seconds=CYCLE)
    assert [(s.request_id, s.at, s.node_ids) for s in got.starts] == [("q", 100.0, ("n2",))]
    assert reference(trace, policy) == [("q", 100.0, ("n2",))]


def _busy_trace() -> Trace:
    snap = fleet(node("n1"), node("n2"), teams=(Team("a", "c"), Team("b", "c")))
    subs = [
        Submission(
            req(f"r{i:03d}", team="ab"[i % 2], gpu_count=1 + i % 3, submitted_at=60.0 * i,
                max_runtime_seconds=7200.0),
            60.0 * i,
            1800.0 + 30 * i,
        )
        for i in range(40)
    ]  # fmt: skip
    return Trace(snap, 0.0, 86_400.0, tuple(subs))


def test_raising_a_team_weight_lowers_its_wait() -> None:
    trace = _busy_trace()
    before = dict(replay(trace).team_wait_p50)
    after = dict(replay(trace, change=PolicyChange(team_weights=(("a", 10.0),))).team_wait_p50)
    assert after["a"] < before["a"]
    assert after["b"] > before["b"]


def test_replay_reports_the_figures_of_a_busy_day() -> None:
    result = replay(_busy_trace())
    assert result.started == result.finished == result.submitted == 40
    assert result.waiting_at_end == 0
    # 40 requests of 1-3 cards for 30-50 min on 16 cards over a day.
    demand = sum((1 + i % 3) * (1800.0 + 30 * i) for i in range(40))
    assert math.isclose(result.utilisation, demand / (16 * 86_400.0))
    (tier,) = result.waits
    assert tier.requests == 40 and 0 < tier.p50_seconds <= tier.p90_seconds


def test_the_fair_share_gap_follows_what_the_queue_asks() -> None:
    """Team a holds all four cards for an hour. Team b asks for four (three of them withdrawn
    at 30 min), so a fair split of what runs is 2/2 (a 2-card gap, 50 points of the fleet),
    then 3/1 (25 points); averaged over the hour work waited: 37.5 points."""
    snap = fleet(node("n1", gpus=4), teams=(Team("a", "c"), Team("b", "c")))
    busy = RunningAtStart(
        req("run", gpu_count=4), alloc("run", whole_claims("n1", range(4))), ends_at=3600.0
    )
    subs = (
        Submission(req("b3", team="b", gpu_count=3), 0.0, 600.0, withdrawn_at=1800.0),
        Submission(req("b1", team="b"), 0.0, 600.0),
    )
    result = replay(Trace(snap, 0.0, 7200.0, subs, (busy,)), cycle_seconds=CYCLE)
    assert [s.request_id for s in result.starts] == ["b1"]
    assert math.isclose(result.fair_share_gap_points, 37.5)


def test_turning_preemption_off_removes_preemptions() -> None:
    trace = _trace(_preempting_subs(), tight=True)
    assert replay(trace).preemptions > 0
    assert replay(trace, change=PolicyChange(enable_preemption=False)).preemptions == 0


def test_a_withdrawn_request_leaves_the_queue_unstarted() -> None:
    snap = fleet(node("n1", gpus=1))
    blocker = Submission(req("r1", submitted_at=0.0, max_runtime_seconds=3600.0), 0.0, 3600.0)
    gone = Submission(req("r2", submitted_at=5.0), 5.0, 60.0, withdrawn_at=600.0)
    result = replay(Trace(snap, 0.0, 7200.0, (blocker, gone)))
    assert [s.request_id for s in result.starts] == ["r1"]
    assert result.withdrawn == 1
    # r2 waited from 5 s until it was withdrawn at 600 s.
    assert max(w.p90_seconds for w in result.waits) == 595.0


def test_apply_change_overrides_quota_reserve_scoring_and_preemption() -> None:
    snap = fleet(node("n1"), teams=(Team("a", "c"),), quotas=(Quota("a", "gpu", 1.0, 2.0),))
    change = PolicyChange(
        team_weights=(("a", 3.0),),
        quotas=(Quota("a", "gpu", 4.0, 8.0),),
        short_reserve=(("excl", 0.25),),
        pool_scoring=(("excl", "spread"),),
        enable_preemption=False,
    )
    fleet2, policy = apply_change(snap, Policy(), change)
    assert fleet2.teams[0].weight == 3.0
    assert fleet2.quotas == (Quota("a", "gpu", 4.0, 8.0),)
    excl = next(p for p in fleet2.pools if p.name == "excl")
    assert (excl.short_reserve_fraction, excl.scoring) == (0.25, "spread")
    assert policy.enable_preemption is False


def test_water_fill_caps_teams_at_their_demand() -> None:
    fair = water_fill({"a": 1.0, "b": 10.0, "c": 10.0}, {"a": 1.0, "b": 1.0, "c": 2.0}, 10.0)
    assert math.isclose(fair["a"], 1.0)
    assert math.isclose(fair["b"], 3.0)
    assert math.isclose(fair["c"], 6.0)


def test_free_cards_no_node_could_give_the_waiting_job_are_not_stranded() -> None:
    """An 8-card job waits an hour for the busy 8-card node. The 4 free cards of the vGPU pool's
    4-card node could never hold it, so they are not stranded; the 2 free cards beside the
    8-card node are."""
    snap = fleet(node("big", gpus=8), node("small", pool="vgpu", gpus=4))
    busy = RunningAtStart(
        req("run0", gpu_count=6),
        alloc("run0", whole_claims("big", list(range(6)))),
        ends_at=3600.0,
    )
    waiting = Submission(req("r8", gpu_count=8, submitted_at=0.0), 0.0, 600.0)
    result = replay(Trace(snap, 0.0, 2 * 3600.0, (waiting,), (busy,)), cycle_seconds=CYCLE)
    assert [s.request_id for s in result.starts] == ["r8"]
    assert result.stranded_gpu_hours == 2.0
