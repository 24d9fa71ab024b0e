"""Scheduling-engine benchmark, in memory, on the product-shaped W-GPU-2k (bench/product.py).

Run from the repository root:

    .venv/bin/python -m bench.engine            # full fleet, 5 runs
    .venv/bin/python -m bench.engine --quick    # 10% fleet, 5,000 pending, 3 runs

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
* engine.usable_free_ge_left   free GE after the cycle that a waiting request could use now
                               (free minus stranded; bench.yardsticks)
* engine.max_fair_share_gap_points  priority-blind DRF within each priority class and pool,
                               handing out the pools' free capacity (bench.yardsticks.
                               class_fair_gap)
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
import os
import statistics
import time
from collections import Counter
from dataclasses import replace

from bench import product
from bench.figures import emit
from bench.host_load import overcommitted_nodes, with_host_resources, without_host_requests
from bench.packing import PoolFigures, stranded, total
from bench.yardsticks import (
    admitted_ge,
    class_fair_gap,
    quota_breaches,
    usage_after,
)
from scheduling.engine.planner import Scheduler
from scheduling.engine.types import Plan, Policy, Request, Snapshot


def arrivals(fleet: product.Fleet, n: int) -> list[Request]:
    """`n` newly arrived requests spread over all teams, drawn like the queue."""
    team_names = sorted(fleet.teams)
    more = product.generate(seed=fleet.seed + 1000, scale=0.02, pending=n, teams=len(team_names))
    return [
        replace(
            r, id=f"arrival-{i:04d}", team=team_names[i % len(team_names)], submitted_at=fleet.now
        )
        for i, r in enumerate(product.snapshot(more).pending)
    ]


def _pool_lines(name: str, figures: dict[str, PoolFigures]) -> None:
    for pool, f in figures.items():
        print(
            f"  {name:8s} {pool:14s} capacity {f.capacity_ge:7.0f} GE, admitted "
            f"{f.admitted_ge:8.2f}, free after {f.free_ge:7.2f}, stranded {f.stranded_ge:7.2f}"
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
    args = ap.parse_args()
    runs = args.runs or (3 if args.quick else 5)
    scale: dict[str, float] = dict(scale=0.1, pending=5_000, teams=20) if args.quick else {}
    if args.pending is not None:
        scale["pending"] = args.pending
    fleet = product.generate(seed=args.seed, **scale)  # type: ignore[arg-type]
    snap, now, capacity = product.snapshot(fleet), fleet.now, fleet.capacity_ge
    flavor_kind = {f.id: f.kind for f in snap.flavors}
    multi = sum(1 for r in snap.pending if r.gpu_count > 1 and flavor_kind[r.flavor] != "whole")
    print(
        f"workload W-GPU-2k{', quick (10% fleet)' if args.quick else ''}: {len(snap.nodes)} "
        f"nodes, {len(snap.devices)} GPUs, {len(snap.pools)} pools, {len(snap.teams)} teams, "
        f"{len(snap.allocations)} running, {len(snap.pending)} pending ({multi} multi-share "
        f"vGPU/MIG), seed {fleet.seed}, {runs} runs; load average {os.getloadavg()[0]:.1f} on "
        f"{os.cpu_count()} CPUs"
    )

    cycle: list[float] = []
    cpu: list[float] = []
    plan_only: list[float] = []
    engine_plan: Plan | None = None
    for _ in range(runs):
        gc.collect()  # start each timed run from a clean heap (not timed)
        c0 = time.process_time()
        t0 = time.perf_counter()
        sched = Scheduler(snap, Policy())
        t1 = time.perf_counter()
        p = sched.plan(now)
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
    base_plan = Scheduler(snap, Policy(placer="best_fit")).plan(now)

    # Arrival latency against the indexed starting state (capacity exists).
    fresh = arrivals(fleet, 200)
    lat_all, lat_admitted = arrival_latencies(snap, fresh, now, runs)

    codes = Counter(x.code for x in engine_plan.waiting)
    print(
        f"engine plan: {len(engine_plan.admissions)} admitted, {len(engine_plan.preemptions)} "
        f"preemptions, {len(engine_plan.reservations)} reservations, waiting by code "
        f"{dict(sorted(codes.items()))}"
    )
    print(
        f"best-fit plan: {len(base_plan.admissions)} admitted, "
        f"{len(base_plan.preemptions)} preemptions"
    )
    emit(
        "engine.plan_decisions_per_second",
        len(snap.pending) / full,
        "decisions/s",
        f"in-memory plan decisions per second: {len(snap.pending) / full:,.0f} "
        f"({len(snap.pending)} pending / {full:.3f} s; no database read or write, see "
        "bench.engine_db for engine.decisions_per_second)",
    )
    emit(
        "engine.plan_seconds",
        full,
        "s",
        f"in-memory plan: {full:.3f} s median (index build "
        f"{statistics.median(c - p for c, p in zip(cycle, plan_only, strict=True)):.3f} s + "
        f"queue {statistics.median(plan_only):.3f} s); runs {[round(c, 3) for c in cycle]}; "
        f"CPU time {statistics.median(cpu):.3f} s median (less sensitive to other work on the "
        f"machine)",
    )
    med = statistics.median(lat_admitted) if lat_admitted else float("nan")
    p99 = lat_all[int(0.99 * (len(lat_all) - 1))] if lat_all else float("nan")
    emit(
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
        emit(f"engine.pool.{pool}.engine_stranded_ge", eng[pool].stranded_ge, "GE")
        emit(f"engine.pool.{pool}.best_fit_stranded_ge", base[pool].stranded_ge, "GE")
    e_st, b_st = total(eng.values(), "stranded_ge"), total(base.values(), "stranded_ge")
    emit(
        "engine.stranded_ge",
        e_st,
        "GE",
        f"stranded after the cycle: engine {e_st:.2f} GE, best-fit {b_st:.2f} GE of "
        f"{capacity:.0f}; free: engine {total(eng.values(), 'free_ge'):.2f}, best-fit "
        f"{total(base.values(), 'free_ge'):.2f}",
    )
    emit("engine.best_fit_stranded_ge", b_st, "GE", f"best-fit stranded: {b_st:.2f} GE")
    both_nothing = b_st == 0 and e_st == 0
    ratio = 1.0 if both_nothing else e_st / b_st if b_st > 0 else float("inf")
    emit(
        "engine.stranded_vs_best_fit",
        ratio,
        "ratio",
        f"stranded vs best-fit: {ratio:.3f}"
        + (" (both strand nothing: no advantage, taken as 1)" if both_nothing else ""),
    )
    e_adm, b_adm = admitted_ge(snap, engine_plan), admitted_ge(snap, base_plan)
    emit(
        "engine.admitted_ge_vs_best_fit",
        e_adm / b_adm if b_adm > 0 else 1.0,
        "ratio",
        f"admitted GE: engine {e_adm:.2f}, best-fit {b_adm:.2f}",
    )
    e_usable = total(eng.values(), "free_ge") - e_st
    emit(
        "engine.usable_free_ge_left",
        e_usable,
        "GE",
        f"free GE left after the cycle that a waiting request could use now (fits, within "
        f"quota): engine {e_usable:.2f}, best-fit {total(base.values(), 'free_ge') - b_st:.2f}",
    )
    gap, detail = class_fair_gap(snap, engine_plan, capacity)
    emit(
        "engine.max_fair_share_gap_points",
        gap,
        "points",
        f"max fair-share gap, priority-blind DRF within each priority class and pool, free "
        f"capacity handed out: {gap:.2f} points ({detail})",
    )
    breaches = quota_breaches(snap, engine_plan)
    emit("engine.quota_breaches", breaches, "count", f"quota breaches: {breaches}")
    host_figures(fleet, snap, engine_plan, fresh, runs)


def arrival_latencies(
    snap: Snapshot, fresh: list[Request], now: float, runs: int
) -> tuple[list[float], list[float]]:
    """`Scheduler.place_one` times (ms) for each arrival, all and admitted, sorted."""
    lat_all: list[float] = []
    lat_admitted: list[float] = []
    for _ in range(runs):
        sched = Scheduler(snap, Policy())
        for r in fresh:
            t0 = time.perf_counter()
            d = sched.place_one(r, now)
            dt = (time.perf_counter() - t0) * 1000
            lat_all.append(dt)
            if d.admission is not None:
                lat_admitted.append(dt)
    return sorted(lat_all), sorted(lat_admitted)


def host_figures(
    fleet: product.Fleet, snap: Snapshot, plain: Plan, fresh: list[Request], runs: int
) -> None:
    """The cycle on the same workload with host resources and CPU-only load (host_load.py)."""
    host = with_host_resources(snap, fleet.seed)
    times: list[float] = []
    cpu: list[float] = []
    host_plan: Plan | None = None
    for _ in range(runs):
        gc.collect()
        c0 = time.process_time()
        t0 = time.perf_counter()
        got = Scheduler(host, Policy()).plan(fleet.now)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        host_plan = host_plan or got
    assert host_plan is not None
    blind = Scheduler(without_host_requests(host), Policy()).plan(fleet.now)
    arrivals_host = with_host_resources(replace(snap, pending=tuple(fresh)), fleet.seed + 1)
    lat_all, lat_admitted = arrival_latencies(host, list(arrivals_host.pending), fleet.now, runs)
    host_wait = Counter("host" if "beside" in x.reason else x.code for x in host_plan.waiting)
    print(
        f"with host resources: {len(host_plan.admissions)} admitted, "
        f"{len(host_plan.preemptions)} preemptions, waiting by code "
        f"{dict(sorted(host_wait.items()))} ('host': CPU or memory, not GPUs, is missing)"
    )
    emit("engine.admitted", len(plain.admissions), "count", f"admitted: {len(plain.admissions)}")
    emit(
        "engine.host.admitted",
        len(host_plan.admissions),
        "count",
        f"admitted with host resources: {len(host_plan.admissions)}",
    )
    full = statistics.median(times)
    emit(
        "engine.host.plan_seconds",
        full,
        "s",
        f"in-memory plan with host resources: {full:.3f} s median; runs "
        f"{[round(t, 3) for t in times]}; CPU time {statistics.median(cpu):.3f} s median",
    )
    med = statistics.median(lat_admitted) if lat_admitted else float("nan")
    emit(
        "engine.host.arrival_decision_ms",
        med,
        "ms",
        f"arrival decision with host resources: {med:.3f} ms median over {len(lat_admitted)} "
        f"admitted arrivals (all {len(lat_all)}: median {statistics.median(lat_all):.3f} ms)",
    )
    over = overcommitted_nodes(host, host_plan)
    blind_over = overcommitted_nodes(host, blind)
    emit(
        "engine.host.overcommitted_nodes",
        over,
        "count",
        f"nodes over their CPU or memory after the cycle: {over} of {len(host.nodes)}",
    )
    emit(
        "engine.host_blind.overcommitted_nodes",
        blind_over,
        "count",
        f"the same, placing by GPUs alone: {blind_over} of {len(host.nodes)} "
        f"({len(blind.admissions)} admitted)",
    )


if __name__ == "__main__":
    main()
