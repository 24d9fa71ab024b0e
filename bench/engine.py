"""Scheduling-engine benchmark on the synthetic W-GPU-2k workload.

Run from the repository root:

    .venv/bin/python -m bench.engine            # full fleet, 5 runs
    .venv/bin/python -m bench.engine --quick    # 10% fleet, 5,000 pending, 3 runs

Figures (medians over --runs, all in one process on the same seeded workload):

* engine.decisions_per_second  pending requests decided / full-cycle seconds
* engine.full_cycle_seconds    Scheduler(snapshot) + plan(now): index build plus the whole queue
* engine.arrival_decision_ms   Scheduler.place_one for a newly arrived request against the
                               indexed starting state (60% full, so capacity exists); median of
                               the admitted arrivals
* engine.unallocated_vs_best_fit  free GPU-equivalents left after the engine's cycle divided by
                               those left after the best-fit baseline's cycle (same snapshot, same
                               queue order, same quota rules; only placement differs)
* engine.max_fair_share_gap_points  max over teams of |actual - fair| share of fleet capacity, in
                               percentage points; fair = weighted max-min (water-filling) of the
                               fleet's GE over the teams' demand (running + pending GE of each
                               flavor, capped by the flavor's limit), weights = guaranteed-quota
                               share
* engine.quota_breaches        (team, flavor) pairs whose usage after the plan exceeds the limit
                               and grew during the cycle; must be 0

Each figure is printed as a human-readable line and as one JSON line
{"metric": ..., "value": ..., "unit": ...}.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from collections import Counter, defaultdict
from dataclasses import replace

from bench.workload import MULTI_SHARE, Workload, generate
from scheduling.engine import Plan, Policy, Request, Scheduler, Snapshot


def _emit(metric: str, value: float, unit: str, text: str) -> None:
    print(text)
    print(json.dumps({"metric": metric, "value": round(value, 6), "unit": unit}))


def _usage_after(snap: Snapshot, plan: Plan) -> dict[tuple[str, str], float]:
    flavors = {f.id: f for f in snap.flavors}
    out: defaultdict[tuple[str, str], float] = defaultdict(float)
    victims = {p.victim_id for p in plan.preemptions}
    for a in snap.allocations:
        if a.request_id not in victims:
            out[(a.team, a.flavor)] += a.gpu_equivalents
    reqs = {r.id: r for r in snap.pending}
    for adm in plan.admissions:
        r = reqs[adm.request_id]
        out[(r.team, r.flavor)] += r.gpu_count * flavors[r.flavor].gpu_equivalent
    return out


def quota_breaches(snap: Snapshot, plan: Plan) -> int:
    before: defaultdict[tuple[str, str], float] = defaultdict(float)
    for a in snap.allocations:
        before[(a.team, a.flavor)] += a.gpu_equivalents
    limit = {(q.team, q.flavor): q.limit for q in snap.quotas if q.project is None}
    after = _usage_after(snap, plan)
    return sum(
        1
        for key, used in after.items()
        if used > limit.get(key, 0.0) + 1e-6 and used > before[key] + 1e-6
    )


def _water_fill(
    current: dict[str, float], extra: dict[str, float], weight: dict[str, float], budget: float
) -> dict[str, float]:
    """Weighted water-filling: raise totals toward lambda * weight, each by at most `extra`."""
    teams = sorted(current)
    give = min(budget, sum(extra.values()))
    if give <= 0:
        return dict(current)

    def handed(level: float) -> float:
        return sum(min(extra[t], max(0.0, level * weight[t] - current[t])) for t in teams)

    lo, hi = 0.0, 1.0
    while handed(hi) < give and hi < 1e15:
        hi *= 2
    for _ in range(100):
        mid = (lo + hi) / 2
        if handed(mid) < give:
            lo = mid
        else:
            hi = mid
    return {t: current[t] + min(extra[t], max(0.0, hi * weight[t] - current[t])) for t in teams}


def fair_shares(snap: Snapshot, plan: Plan, capacity: float, by_priority: bool) -> dict[str, float]:
    """Each team's weighted DRF fair share (GE) of the fleet after this cycle.

    Start from the running work that survives the plan; hand the rest of the fleet out by
    weighted water-filling (weights = guaranteed-quota share) over each team's pending demand,
    capped per flavor by the team's limit.  With `by_priority`, priority classes are served
    strictly one after the other, as the queue order prescribes; without, all at once.
    """
    flavors = {f.id: f for f in snap.flavors}
    guaranteed: defaultdict[str, float] = defaultdict(float)
    limit: dict[tuple[str, str], float] = {}
    for q in snap.quotas:
        if q.project is None:
            guaranteed[q.team] += q.guaranteed
            limit[(q.team, q.flavor)] = q.limit
    teams = sorted(t.name for t in snap.teams)
    total_g = sum(guaranteed.values()) or 1.0
    weight = {t: max(guaranteed[t] / total_g, 1e-12) for t in teams}
    victims = {p.victim_id for p in plan.preemptions}
    used_tf: defaultdict[tuple[str, str], float] = defaultdict(float)
    current = dict.fromkeys(teams, 0.0)
    for a in snap.allocations:
        if a.request_id not in victims:
            used_tf[(a.team, a.flavor)] += a.gpu_equivalents
            current[a.team] += a.gpu_equivalents
    levels: defaultdict[int, defaultdict[tuple[str, str], float]] = defaultdict(
        lambda: defaultdict(float)
    )
    for r in snap.pending:
        lvl = r.priority if by_priority else 0
        levels[lvl][(r.team, r.flavor)] += r.gpu_count * flavors[r.flavor].gpu_equivalent
    budget = capacity - sum(current.values())
    for lvl in sorted(levels, reverse=True):
        extra = dict.fromkeys(teams, 0.0)
        for (team, flavor), d in sorted(levels[lvl].items()):
            room = max(0.0, limit.get((team, flavor), 0.0) - used_tf[(team, flavor)])
            take = min(d, room)
            extra[team] += take
            used_tf[(team, flavor)] += take  # conservative: assume this level gets it all
        after = _water_fill(current, extra, weight, budget)
        budget -= sum(after.values()) - sum(current.values())
        current = after
    return current


def fair_share_gap(
    snap: Snapshot, plan: Plan, capacity: float, by_priority: bool = True
) -> tuple[float, str]:
    """Max |actual - fair| over teams in points of fleet capacity, and the worst team."""
    fair = fair_shares(snap, plan, capacity, by_priority)
    actual: defaultdict[str, float] = defaultdict(float)
    for (team, _), used in _usage_after(snap, plan).items():
        actual[team] += used
    gaps = {t: abs(actual[t] - fair[t]) / capacity * 100 for t in fair}
    worst = max(sorted(gaps), key=lambda t: gaps[t])
    detail = (
        f"{worst}: actual {actual[worst] / capacity * 100:.2f}% vs fair "
        f"{fair[worst] / capacity * 100:.2f}%"
    )
    return gaps[worst], detail


def arrivals(w: Workload, n: int, seed: int) -> list[Request]:
    fresh = generate(
        seed=seed + 1000,
        scale=0.02,
        pending=n,
        teams=len(w.snapshot.teams),
        multi_share=w.multi_share,
    )
    team_names = [t.name for t in w.snapshot.teams]
    out = []
    for i, r in enumerate(fresh.snapshot.pending):
        out.append(
            Request(
                id=f"arrival-{i:04d}",
                team=team_names[i % len(team_names)],
                flavor=r.flavor,
                submitted_at=w.now,
                gpu_count=r.gpu_count,
                kind=r.kind,
                priority=r.priority,
                is_preemptible=r.is_preemptible,
                allow_shared_node=r.allow_shared_node,
                pinned_model=r.pinned_model,
                max_runtime_seconds=r.max_runtime_seconds,
            )
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=None, help="repetitions (default 5, quick 3)")
    ap.add_argument("--quick", action="store_true", help="10%% fleet, 5,000 pending")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument(
        "--multi-share",
        type=float,
        default=MULTI_SHARE,
        help="share of pending vGPU/MIG requests asking for 2-4 shares (0: single shares only)",
    )
    ap.add_argument(
        "--short-reserve",
        type=float,
        default=0.0,
        help="give every pool a short-request reserve of this share (requests up to 2 h)",
    )
    args = ap.parse_args()
    runs = args.runs or (3 if args.quick else 5)
    if args.quick:
        w = generate(
            seed=args.seed, scale=0.1, pending=5_000, teams=20, multi_share=args.multi_share
        )
    else:
        w = generate(seed=args.seed, multi_share=args.multi_share)
    snap = w.snapshot
    if args.short_reserve:
        pools = tuple(
            replace(p, short_reserve_fraction=args.short_reserve, short_max_runtime_seconds=7200)
            for p in snap.pools
        )
        snap = replace(snap, pools=pools)
        w = replace(w, snapshot=snap)
    label = "quick (10% fleet)" if args.quick else "W-GPU-2k"
    if args.short_reserve:
        label += f", {args.short_reserve:.0%} short-request reserve per pool"
    flavor_kind = {f.id: f.kind for f in snap.flavors}
    multi = sum(1 for r in snap.pending if r.gpu_count > 1 and flavor_kind[r.flavor] != "whole")
    print(
        f"workload {label}: {len(snap.nodes)} nodes, {len(snap.devices)} GPUs, "
        f"{len(snap.teams)} teams, {len(snap.allocations)} running, {len(snap.pending)} pending "
        f"({multi} multi-share vGPU/MIG), seed {w.seed}, {runs} runs"
    )

    cycle: list[float] = []
    plan_only: list[float] = []
    engine_plan: Plan | None = None
    engine_free = 0.0
    for _ in range(runs):
        sched = None
        gc.collect()  # start each timed run from a clean heap (not timed)
        t0 = time.perf_counter()
        sched = Scheduler(snap, Policy())
        t1 = time.perf_counter()
        p = sched.plan(w.now)
        t2 = time.perf_counter()
        cycle.append(t2 - t0)
        plan_only.append(t2 - t1)
        if engine_plan is None:
            engine_plan, engine_free = p, sched.free_gpu_equivalents()
        else:
            assert p == engine_plan, "plan is not deterministic"
    assert engine_plan is not None
    full = statistics.median(cycle)

    # For the record: one cycle with the cyclic GC left running (Policy(pause_gc=False)).
    gc.collect()
    t0 = time.perf_counter()
    Scheduler(snap, Policy(pause_gc=False)).plan(w.now)
    gc_on = time.perf_counter() - t0

    base_times: list[float] = []
    base_plan: Plan | None = None
    base_free = 0.0
    for _ in range(max(1, runs // 2)):
        gc.collect()
        t0 = time.perf_counter()
        bs = Scheduler(snap, Policy(placer="best_fit"))
        bp = bs.plan(w.now)
        base_times.append(time.perf_counter() - t0)
        base_plan, base_free = bp, bs.free_gpu_equivalents()
    assert base_plan is not None

    # Arrival latency against the indexed starting state (capacity exists).
    lat_all: list[float] = []
    lat_admitted: list[float] = []
    for _ in range(runs):
        sched = Scheduler(snap, Policy())
        for r in arrivals(w, 200, w.seed):
            t0 = time.perf_counter()
            d = sched.place_one(r, w.now)
            dt = (time.perf_counter() - t0) * 1000
            lat_all.append(dt)
            if d.admission is not None:
                lat_admitted.append(dt)
    lat_admitted.sort()
    lat_all.sort()

    codes = Counter(x.code for x in engine_plan.waiting)
    if args.short_reserve:
        held = sum(1 for x in engine_plan.waiting if "for requests up to" in x.reason)
        print(f"waiting because of a short-request reserve: {held}")
    print(
        f"engine plan: {len(engine_plan.admissions)} admitted, {len(engine_plan.preemptions)} "
        f"preemptions, {len(engine_plan.reservations)} reservations, waiting by code "
        f"{dict(sorted(codes.items()))}"
    )
    print(
        f"best-fit plan: {len(base_plan.admissions)} admitted, {len(base_plan.preemptions)} "
        f"preemptions, cycle {statistics.median(base_times):.3f} s"
    )
    _emit(
        "engine.decisions_per_second",
        len(snap.pending) / full,
        "decisions/s",
        f"decisions per second: {len(snap.pending) / full:,.0f} "
        f"({len(snap.pending)} pending / {full:.3f} s)",
    )
    _emit(
        "engine.full_cycle_seconds",
        full,
        "s",
        f"full cycle: {full:.3f} s median (index build "
        f"{statistics.median(c - p for c, p in zip(cycle, plan_only, strict=True)):.3f} s + "
        f"queue {statistics.median(plan_only):.3f} s); runs {[round(c, 3) for c in cycle]}; "
        f"with the GC left running: {gc_on:.3f} s",
    )
    med = statistics.median(lat_admitted) if lat_admitted else float("nan")
    p99 = lat_all[int(0.99 * (len(lat_all) - 1))] if lat_all else float("nan")
    _emit(
        "engine.arrival_decision_ms",
        med,
        "ms",
        f"arrival decision: {med:.3f} ms median over {len(lat_admitted)} admitted arrivals "
        f"(all {len(lat_all)}: median {statistics.median(lat_all):.3f} ms, p99 {p99:.3f} ms)",
    )
    ratio = engine_free / base_free if base_free else (0.0 if engine_free == 0 else float("inf"))
    _emit(
        "engine.unallocated_vs_best_fit",
        ratio,
        "ratio",
        f"unallocated GPU-eq after the cycle: engine {engine_free:.2f}, best-fit "
        f"{base_free:.2f} of {w.capacity_ge:.0f} (ratio {ratio:.3f})",
    )
    gap, detail = fair_share_gap(snap, engine_plan, w.capacity_ge)
    flat_gap, flat_detail = fair_share_gap(snap, engine_plan, w.capacity_ge, by_priority=False)
    _emit(
        "engine.max_fair_share_gap_points",
        gap,
        "points",
        f"max fair-share gap: {gap:.2f} points ({detail}); ignoring priority classes: "
        f"{flat_gap:.2f} points ({flat_detail})",
    )
    breaches = quota_breaches(snap, engine_plan)
    _emit("engine.quota_breaches", breaches, "count", f"quota breaches: {breaches}")


if __name__ == "__main__":
    main()
