"""Policy replay benchmark: a week of the product-shaped W-GPU-2k replayed through the planner.

Run from the repository root:

    .venv/bin/python -m bench.replay             # 2,000 nodes, 7 days, offered load 0.8
    .venv/bin/python -m bench.replay --quick     # 10% fleet, 1 day

The trace (seeded, drawn before the clock starts): the fleet of bench/product.py (2,000 nodes,
16,000 GPUs, five pools, 200 teams with their quotas), 60% full at the start with its running
work (each ends at its start plus its declared runtime x U(0.3, 1)); submissions drawn like the
product's queue (flavor, count, team, priority, declared runtime), queued uniformly over the
window, each running for its declared runtime x U(0.3, 1) once started. Each request names its
one pool; submissions are drawn pool by pool, from that pool's requests, as many as make its
offered load (GE x actual runtime) `--load` of its capacity over the window, so no pool is
overloaded while another idles. A team may still be offered more than its quota lets it run.

Figures:

* replay.week_seconds   wall time of `scheduling.engine.replay.replay(trace)` under the default
                        policy: index build, every cycle (one per 10 s tick with an event), the
                        metrics; not the drawing of the trace, no database, no Django
* replay.cycles, replay.submissions, replay.utilisation, replay.preemptions,
  replay.stranded_gpu_hours, replay.fair_share_gap_points, replay.wait_p50_seconds.tier<N>:
                        what that replay reported, for the record

Each figure is printed as a human-readable line and as one JSON line
{"metric": ..., "value": ..., "unit": ...}.
"""

from __future__ import annotations

import argparse
import gc
import os
import time
from collections import defaultdict
from dataclasses import replace

import numpy as np

from bench import product
from bench.figures import emit
from scheduling.engine.replay import RunningAtStart, Submission, Trace, replay
from scheduling.engine.types import Policy, Request

DAY = 86_400.0


def build_trace(*, seed: int, scale: float, days: float, load: float) -> Trace:
    """The seeded trace described in the module docstring."""
    rng = np.random.default_rng(seed + 5_000)
    fleet = product.generate(seed=seed, scale=scale, pending=20_000)
    snap = product.snapshot(fleet)
    start = fleet.now
    end = start + days * DAY
    running = []
    for row, allocation in zip(fleet.running, snap.allocations, strict=True):
        request = product.engine_request(fleet, row)
        ran = row.max_runtime_seconds * float(rng.uniform(0.3, 1.0))
        running.append(
            RunningAtStart(request, allocation, ends_at=max(start, allocation.started_at + ran))
        )
    ge = {f.id: f.gpu_equivalent for f in snap.flavors}
    pool_of_node = {n.id: n.pool for n in snap.nodes}
    capacity: dict[str, int] = defaultdict(int)
    for device in snap.devices:
        capacity[pool_of_node[device.node_id]] += 1
    # Each request of the product's queue names its one pool; every pool is offered `load`.
    by_pool: dict[str, list[Request]] = defaultdict(list)
    for r in snap.pending:
        by_pool[r.pools[0]].append(r)
    drawn: list[tuple[float, Request, float]] = []
    for pool in sorted(by_pool):
        sample = by_pool[pool]
        mean_work = float(
            np.mean([r.gpu_count * ge[r.flavor] * r.max_runtime_seconds * 0.65 for r in sample])
        )
        count = int(load * capacity[pool] * (end - start) / mean_work)
        picks = rng.integers(0, len(sample), size=count)
        queued = rng.uniform(start, end, size=count)
        shares = rng.uniform(0.3, 1.0, size=count)
        drawn.extend(
            (float(at), sample[int(p)], sample[int(p)].max_runtime_seconds * float(u))
            for p, at, u in zip(picks, queued, shares, strict=True)
        )
    drawn.sort(key=lambda d: d[0])
    submissions = tuple(
        Submission(replace(r, id=f"s{i:07d}", submitted_at=at), at, runtime_seconds=runtime)
        for i, (at, r, runtime) in enumerate(drawn)
    )
    return Trace(replace(snap, pending=()), start, end, submissions, tuple(running))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="10%% fleet, one day")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--days", type=float, default=None, help="window (default 7, quick 1)")
    ap.add_argument("--load", type=float, default=0.8, help="offered load, share of capacity")
    ap.add_argument("--cycle-seconds", type=float, default=10.0)
    args = ap.parse_args()
    scale = 0.1 if args.quick else 1.0
    days = args.days or (1.0 if args.quick else 7.0)
    trace = build_trace(seed=args.seed, scale=scale, days=days, load=args.load)
    fleet = trace.fleet
    print(
        f"trace W-GPU-2k product-shaped{' quick (10% fleet)' if args.quick else ''}: "
        f"{len(fleet.nodes)} nodes, {len(fleet.devices)} GPUs, {len(fleet.pools)} pools, "
        f"{len(fleet.teams)} teams; {days:g} days, {len(trace.running)} running at the start, "
        f"{len(trace.submissions)} submissions (offered load {args.load:.2f}), cycle "
        f"{args.cycle_seconds:g} s, seed {args.seed}; load average {os.getloadavg()[0]:.1f} "
        f"on {os.cpu_count()} CPUs"
    )
    # The trace (millions of requests for a week) is input, not replay work: frozen out of the
    # collector, so the replay's collections scan what the replay itself keeps.
    gc.collect()
    gc.freeze()
    c0 = time.process_time()
    t0 = time.perf_counter()
    result = replay(trace, policy=Policy(), cycle_seconds=args.cycle_seconds)
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    metric = "replay.week_seconds" if days == 7.0 and not args.quick else "replay.window_seconds"
    emit(
        metric,
        wall,
        "s",
        f"replay of {days:g} days: {wall:.1f} s wall, {cpu:.1f} s CPU "
        f"({result.cycles} cycles, {result.cycles / wall:.0f} cycles/s; index build, cycles and "
        "figures; not the trace drawing, no database)",
    )
    emit("replay.cycles", result.cycles, "count", f"cycles run: {result.cycles}")
    emit(
        "replay.submissions",
        result.submitted,
        "count",
        f"submissions {result.submitted}: started {result.started}, finished {result.finished}, "
        f"waiting at the end {result.waiting_at_end}, failed after preemptions {result.failed}",
    )
    emit(
        "replay.utilisation",
        result.utilisation,
        "ratio",
        f"GPU-equivalent utilisation {result.utilisation:.3f} of {result.capacity_ge:.0f} GE",
    )
    emit("replay.preemptions", result.preemptions, "count", f"preemptions {result.preemptions}")
    emit(
        "replay.stranded_gpu_hours",
        result.stranded_gpu_hours,
        "GPU-hours",
        f"stranded {result.stranded_gpu_hours:.1f} GPU-hours",
    )
    emit(
        "replay.fair_share_gap_points",
        result.fair_share_gap_points,
        "points",
        f"fair-share gap {result.fair_share_gap_points:.2f} points "
        f"(worst {result.fair_share_worst_team})",
    )
    for w in result.waits:
        emit(
            f"replay.wait_p50_seconds.tier{w.tier}",
            w.p50_seconds,
            "s",
            f"tier {w.tier}: {w.requests} requests, {w.started} started, wait p50 "
            f"{w.p50_seconds:.0f} s, p90 {w.p90_seconds:.0f} s",
        )


if __name__ == "__main__":
    main()
