"""Scheduling-engine benchmark, in memory, on the product-shaped W-GPU-2k (bench/product.py).

Run from the repository root:

    .venv/bin/python -m bench.engine            # full fleet, 5 runs
    .venv/bin/python -m bench.engine --quick    # 10% fleet, 5,000 pending, 3 runs
    .venv/bin/python -m bench.engine --unpinned # the earlier trace shape: requests name no pool

The requests are built as scheduling/selectors/snapshot.py builds them (pinned to the flavor's
pool and GPU model); bench.engine_db checks that the database reads back this very snapshot.
Nothing here touches a database: the cycle on PostgreSQL, and engine.decisions_per_second, come from
bench.engine_db.

Figures (medians over --runs, all in one process on the same seeded workload):

* engine.plan_decisions_per_second  pending requests / engine.plan_seconds (in memory only)
* engine.plan_seconds          Scheduler(snapshot) + plan(now): index build plus the whole queue;
                               no snapshot read, no writes
* engine.arrival_decision_ms   Scheduler.place_one for a newly arrived request against the
                               indexed starting state; median of the admitted arrivals
* engine.stranded_ge           free GE after the engine's cycle, summed per pool, that no
                               request still waiting in that pool can use (it fits no node: pool,
                               model, labels, taints, shared/exclusive node, N cards / shares /
                               instances) within quota now; computed by bench/packing.py, not
                               by the engine; engine.best_fit_stranded_ge the same after the
                               best-fit baseline's cycle (same snapshot, queue order, quota,
                               preemption and backfill rules; only placement differs);
                               engine.stranded_vs_best_fit their ratio; per pool as
                               engine.pool.<pool>.{engine,best_fit}_stranded_ge
* engine.admitted_ge_vs_best_fit  GE the engine admits / GE the best-fit baseline admits
* engine.fgd.plan_seconds      the same cycle with the fragmentation-aware placer
                               (`Policy(placer="fgd")`, not the default), median of the runs;
                               engine.fgd.stranded_vs_best_fit its stranded GE over best-fit's
* engine.usable_free_ge_left   free GE after the cycle that a waiting request could use now
                               (free minus stranded; bench.yardsticks)
* engine.max_fair_share_gap_points  priority-blind DRF within each priority class and pool,
                               handing out the pools' free capacity (bench.yardsticks.
                               class_fair_gap); engine.fair_share_gap_admitted_budget_points the
                               same handing out only what the engine admitted; also printed: the
                               earlier reference (whole fleet, classes served in turn) and a
                               whole-fleet priority-blind one
* engine.quota_breaches        (team, flavor) pairs whose usage after the plan exceeds the limit
                               and grew during the cycle; must be 0

With host resources (bench/host_load.py: the same workload with nodes' CPU and memory, CPU-only
load of other tenants on 30% of the nodes, and every pod's CPU and memory):

* engine.host.plan_seconds, engine.host.arrival_decision_ms   as above, on that snapshot
* engine.admitted, engine.host.admitted   admissions of the cycle without and with host
                               resources
* engine.host.overcommitted_nodes   nodes whose CPU or memory the running work plus the plan
                               exceed; must be 0
* engine.host_blind.overcommitted_nodes   the same for a cycle that places by GPUs alone (the
                               nodes' host resources left unknown to the engine): the pods
                               kube-scheduler would leave Pending

Each figure is printed as a human-readable line and as one JSON line
{"metric": ..., "value": ..., "unit": ...}.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import time
from collections import Counter, defaultdict
from dataclasses import replace

from bench import product
from bench.host_load import overcommitted_nodes, with_host_resources, without_host_requests
from bench.packing import PoolFigures, stranded, total
from bench.workload import MULTI_SHARE, Workload, generate
from bench.yardsticks import (
    admitted_ge,
    class_fair_gap,
    quota_breaches,
    usage_after,
    water_fill,
)
from scheduling.engine import Plan, Policy, Request, Scheduler, Snapshot

POOL_LABEL = product.POOL_LABEL


def _emit(metric: str, value: float, unit: str, text: str) -> None:
    print(text)
    print(json.dumps({"metric": metric, "value": round(value, 6), "unit": unit}))


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
        after = water_fill(current, extra, weight, budget)
        budget -= sum(after.values()) - sum(current.values())
        current = after
    return current


def fair_share_gap(
    snap: Snapshot, plan: Plan, capacity: float, by_priority: bool = True
) -> tuple[float, str]:
    """Max |actual - fair| over teams in points of fleet capacity, and the worst team."""
    fair = fair_shares(snap, plan, capacity, by_priority)
    actual: defaultdict[str, float] = defaultdict(float)
    for (team, _), used in usage_after(snap, plan).items():
        actual[team] += used
    gaps = {t: abs(actual[t] - fair[t]) / capacity * 100 for t in fair}
    worst = max(sorted(gaps), key=lambda t: gaps[t])
    detail = (
        f"{worst}: actual {actual[worst] / capacity * 100:.2f}% vs fair "
        f"{fair[worst] / capacity * 100:.2f}%"
    )
    return gaps[worst], detail


def arrivals(w: Workload, n: int, seed: int, pinned: bool = True) -> list[Request]:
    """`n` newly arrived requests spread over all teams, drawn like the queue."""
    team_names = [t.name for t in w.snapshot.teams]
    if pinned:
        fleet = product.generate(seed=seed + 1000, scale=0.02, pending=n, teams=len(team_names))
        source = product.snapshot(fleet).pending
    else:
        source = generate(
            seed=seed + 1000,
            scale=0.02,
            pending=n,
            teams=len(team_names),
            multi_share=w.multi_share,
        ).snapshot.pending
    return [
        replace(r, id=f"arrival-{i:04d}", team=team_names[i % len(team_names)], submitted_at=w.now)
        for i, r in enumerate(source)
    ]


def _pool_lines(name: str, figures: dict[str, PoolFigures]) -> None:
    for pool, f in figures.items():
        print(
            f"  {name:8s} {pool:14s} capacity {f.capacity_ge:7.0f} GE, admitted "
            f"{f.admitted_ge:8.2f}, free after {f.free_ge:7.2f}, stranded {f.stranded_ge:7.2f} "
            f"(quota-blind {f.stranded_quota_blind_ge:.2f})"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=None, help="repetitions (default 5, quick 3)")
    ap.add_argument("--quick", action="store_true", help="10%% fleet, 5,000 pending")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument(
        "--pending",
        type=int,
        default=None,
        help="pending requests (default 50,000, quick 5,000); about 6,000 matches the free room",
    )
    ap.add_argument(
        "--unpinned",
        action="store_true",
        help="the earlier trace-shaped workload whose requests name no pool (not the product)",
    )
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
    scale: dict[str, float] = dict(scale=0.1, pending=5_000, teams=20) if args.quick else {}
    if args.pending is not None:
        scale["pending"] = args.pending
    if args.unpinned:
        w = generate(seed=args.seed, multi_share=args.multi_share, **scale)  # type: ignore[arg-type]
    else:
        fleet = product.generate(seed=args.seed, multi_share=args.multi_share, **scale)  # type: ignore[arg-type]
        w = Workload(
            product.snapshot(fleet), fleet.now, fleet.capacity_ge, args.seed, args.multi_share
        )
    snap = w.snapshot
    if args.short_reserve:
        pools = tuple(
            replace(p, short_reserve_fraction=args.short_reserve, short_max_runtime_seconds=7200)
            for p in snap.pools
        )
        snap = replace(snap, pools=pools)
        w = replace(w, snapshot=snap)
    label = "W-GPU-2k" + (" unpinned (earlier trace shape)" if args.unpinned else " product-shaped")
    if args.quick:
        label += ", quick (10% fleet)"
    if args.short_reserve:
        label += f", {args.short_reserve:.0%} short-request reserve per pool"
    flavor_kind = {f.id: f.kind for f in snap.flavors}
    multi = sum(1 for r in snap.pending if r.gpu_count > 1 and flavor_kind[r.flavor] != "whole")
    print(
        f"workload {label}: {len(snap.nodes)} nodes, {len(snap.devices)} GPUs, "
        f"{len(snap.pools)} pools, {len(snap.teams)} teams, {len(snap.allocations)} running, "
        f"{len(snap.pending)} pending ({multi} multi-share vGPU/MIG), seed {w.seed}, {runs} runs; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )

    cycle: list[float] = []
    cpu: list[float] = []
    plan_only: list[float] = []
    engine_plan: Plan | None = None
    for _ in range(runs):
        sched = None
        gc.collect()  # start each timed run from a clean heap (not timed)
        c0 = time.process_time()
        t0 = time.perf_counter()
        sched = Scheduler(snap, Policy())
        t1 = time.perf_counter()
        p = sched.plan(w.now)
        t2 = time.perf_counter()
        cpu.append(time.process_time() - c0)
        cycle.append(t2 - t0)
        plan_only.append(t2 - t1)
        if engine_plan is None:
            engine_plan = p
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
    for _ in range(max(1, runs // 2)):
        gc.collect()
        t0 = time.perf_counter()
        base_plan = Scheduler(snap, Policy(placer="best_fit")).plan(w.now)
        base_times.append(time.perf_counter() - t0)
    assert base_plan is not None

    fgd_times: list[float] = []
    fgd_plan: Plan | None = None
    for _ in range(max(1, runs // 2)):
        gc.collect()
        t0 = time.perf_counter()
        fgd_plan = Scheduler(snap, Policy(placer="fgd")).plan(w.now)
        fgd_times.append(time.perf_counter() - t0)
    assert fgd_plan is not None

    # Arrival latency against the indexed starting state (capacity exists).
    lat_all: list[float] = []
    lat_admitted: list[float] = []
    fresh = arrivals(w, 200, w.seed, pinned=not args.unpinned)
    for _ in range(runs):
        sched = Scheduler(snap, Policy())
        for r in fresh:
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
        "engine.plan_decisions_per_second",
        len(snap.pending) / full,
        "decisions/s",
        f"in-memory plan decisions per second: {len(snap.pending) / full:,.0f} "
        f"({len(snap.pending)} pending / {full:.3f} s; no database read or write, see "
        "bench.engine_db for engine.decisions_per_second)",
    )
    _emit(
        "engine.plan_seconds",
        full,
        "s",
        f"in-memory plan: {full:.3f} s median (index build "
        f"{statistics.median(c - p for c, p in zip(cycle, plan_only, strict=True)):.3f} s + "
        f"queue {statistics.median(plan_only):.3f} s); runs {[round(c, 3) for c in cycle]}; "
        f"CPU time {statistics.median(cpu):.3f} s median (less sensitive to other work on the "
        f"machine); with the GC left running: {gc_on:.3f} s",
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

    eng = stranded(snap, engine_plan, usage_after(snap, engine_plan))
    base = stranded(snap, base_plan, usage_after(snap, base_plan))
    print(
        "per pool after the cycle (GE; stranded = free GE no waiting request of the pool can use):"
    )
    _pool_lines("engine", eng)
    _pool_lines("best-fit", base)
    for pool in eng:
        for name, figs in (("engine", eng), ("best_fit", base)):
            print(
                json.dumps(
                    {
                        "metric": f"engine.pool.{pool}.{name}_stranded_ge",
                        "value": round(figs[pool].stranded_ge, 6),
                        "unit": "GE",
                    }
                )
            )
    e_st, b_st = total(eng.values(), "stranded_ge"), total(base.values(), "stranded_ge")
    e_blind = total(eng.values(), "stranded_quota_blind_ge")
    b_blind = total(base.values(), "stranded_quota_blind_ge")
    _emit(
        "engine.stranded_ge",
        e_st,
        "GE",
        f"stranded after the cycle: engine {e_st:.2f} GE, best-fit {b_st:.2f} GE of "
        f"{w.capacity_ge:.0f} (quota-blind: engine {e_blind:.2f}, best-fit {b_blind:.2f}); "
        f"free: engine {total(eng.values(), 'free_ge'):.2f}, best-fit "
        f"{total(base.values(), 'free_ge'):.2f}",
    )
    _emit("engine.best_fit_stranded_ge", b_st, "GE", f"best-fit stranded: {b_st:.2f} GE")
    fgd_fig = stranded(snap, fgd_plan, usage_after(snap, fgd_plan))
    f_st = total(fgd_fig.values(), "stranded_ge")
    fgd_cycle = statistics.median(fgd_times)
    _emit(
        "engine.fgd.plan_seconds",
        fgd_cycle,
        "s",
        f"in-memory plan with the FGD placer: {fgd_cycle:.3f} s median "
        f"({len(fgd_plan.admissions)} admitted, {len(fgd_plan.preemptions)} preemptions)",
    )
    _emit(
        "engine.fgd.stranded_vs_best_fit",
        f_st / b_st if b_st > 0 else 1.0,
        "ratio",
        f"FGD stranded {f_st:.2f} GE, best-fit {b_st:.2f} GE"
        + (" (both strand nothing: taken as 1)" if b_st == 0 and f_st == 0 else ""),
    )
    if b_st > 0:
        ratio, note = e_st / b_st, ""
    else:
        ratio = 0.0 if e_st == 0 else float("inf")
        ratio, note = (
            (1.0, " (both strand nothing: no advantage, taken as 1)") if e_st == 0 else (ratio, "")
        )
    _emit(
        "engine.stranded_vs_best_fit",
        ratio,
        "ratio",
        f"stranded vs best-fit: {ratio:.3f}{note}",
    )
    e_adm, b_adm = admitted_ge(snap, engine_plan), admitted_ge(snap, base_plan)
    _emit(
        "engine.admitted_ge_vs_best_fit",
        e_adm / b_adm if b_adm > 0 else 1.0,
        "ratio",
        f"admitted GE: engine {e_adm:.2f}, best-fit {b_adm:.2f}",
    )
    e_usable = total(eng.values(), "free_ge") - e_st
    _emit(
        "engine.usable_free_ge_left",
        e_usable,
        "GE",
        f"free GE left after the cycle that a waiting request could use now (fits, within "
        f"quota): engine {e_usable:.2f}, best-fit {total(base.values(), 'free_ge') - b_st:.2f}",
    )
    gap, detail = fair_share_gap(snap, engine_plan, w.capacity_ge)
    flat_gap, flat_detail = fair_share_gap(snap, engine_plan, w.capacity_ge, by_priority=False)
    cls_gap, cls_detail = class_fair_gap(snap, engine_plan, w.capacity_ge)
    adm_gap, adm_detail = class_fair_gap(snap, engine_plan, w.capacity_ge, budget="admitted")
    _emit(
        "engine.max_fair_share_gap_points",
        cls_gap,
        "points",
        f"max fair-share gap, priority-blind DRF within each priority class and pool, free "
        f"capacity handed out: {cls_gap:.2f} points ({cls_detail})",
    )
    _emit(
        "engine.fair_share_gap_admitted_budget_points",
        adm_gap,
        "points",
        f"the same with only the GE the engine admitted handed out (the earlier reference, "
        f"which an admit-nothing plan passes): {adm_gap:.2f} points ({adm_detail})",
    )
    _emit(
        "engine.fair_share_gap_by_priority_points",
        gap,
        "points",
        f"fair-share gap against the earlier reference (whole fleet, classes served in turn): "
        f"{gap:.2f} points ({detail})",
    )
    _emit(
        "engine.fair_share_gap_priority_blind_fleet_points",
        flat_gap,
        "points",
        f"fair-share gap against a priority-blind whole-fleet reference (all classes pooled): "
        f"{flat_gap:.2f} points ({flat_detail})",
    )
    breaches = quota_breaches(snap, engine_plan)
    _emit("engine.quota_breaches", breaches, "count", f"quota breaches: {breaches}")
    host_figures(w, snap, engine_plan, fresh, runs)


def host_figures(w: Workload, snap: Snapshot, plain: Plan, fresh: list[Request], runs: int) -> None:
    """The cycle on the same workload with host resources and CPU-only load (host_load.py)."""
    host = with_host_resources(snap, w.seed)
    times: list[float] = []
    cpu: list[float] = []
    host_plan: Plan | None = None
    for _ in range(runs):
        gc.collect()
        c0 = time.process_time()
        t0 = time.perf_counter()
        got = Scheduler(host, Policy()).plan(w.now)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        host_plan = host_plan or got
    assert host_plan is not None
    blind = Scheduler(without_host_requests(host), Policy()).plan(w.now)
    arrivals_host = with_host_resources(replace(snap, pending=tuple(fresh)), w.seed + 1).pending
    lat_all: list[float] = []
    lat_admitted: list[float] = []
    for _ in range(runs):
        sched = Scheduler(host, Policy())
        for r in arrivals_host:
            t0 = time.perf_counter()
            d = sched.place_one(r, w.now)
            dt = (time.perf_counter() - t0) * 1000
            lat_all.append(dt)
            if d.admission is not None:
                lat_admitted.append(dt)
    host_wait = Counter("host" if "beside" in x.reason else x.code for x in host_plan.waiting)
    print(
        f"with host resources: {len(host_plan.admissions)} admitted, "
        f"{len(host_plan.preemptions)} preemptions, waiting by code "
        f"{dict(sorted(host_wait.items()))} ('host': CPU or memory, not GPUs, is missing)"
    )
    _emit("engine.admitted", len(plain.admissions), "count", f"admitted: {len(plain.admissions)}")
    _emit(
        "engine.host.admitted",
        len(host_plan.admissions),
        "count",
        f"admitted with host resources: {len(host_plan.admissions)}",
    )
    full = statistics.median(times)
    _emit(
        "engine.host.plan_seconds",
        full,
        "s",
        f"in-memory plan with host resources: {full:.3f} s median; runs "
        f"{[round(t, 3) for t in times]}; CPU time {statistics.median(cpu):.3f} s median",
    )
    med = statistics.median(lat_admitted) if lat_admitted else float("nan")
    _emit(
        "engine.host.arrival_decision_ms",
        med,
        "ms",
        f"arrival decision with host resources: {med:.3f} ms median over {len(lat_admitted)} "
        f"admitted arrivals (all {len(lat_all)}: median {statistics.median(lat_all):.3f} ms)",
    )
    over = overcommitted_nodes(host, host_plan)
    blind_over = overcommitted_nodes(host, blind)
    _emit(
        "engine.host.overcommitted_nodes",
        over,
        "count",
        f"nodes over their CPU or memory after the cycle: {over} of {len(host.nodes)}",
    )
    _emit(
        "engine.host_blind.overcommitted_nodes",
        blind_over,
        "count",
        f"the same, placing by GPUs alone: {blind_over} of {len(host.nodes)} "
        f"({len(blind.admissions)} admitted)",
    )


if __name__ == "__main__":
    main()
