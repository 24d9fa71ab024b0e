"""Packing benchmark: the fragmentation-aware placer (FGD) against best-fit on a mixed fleet.

Run from the repository root:

    .venv/bin/python -m bench.fragmentation            # 5 seeds, ~120 nodes, a day of replay
    .venv/bin/python -m bench.fragmentation --quick    # 3 seeds, ~40 nodes, 6 hours

The fleet (`mixed_fleet`, seeded): several GPU models and memory sizes, nodes of 1, 2, 4 and 8
cards, exclusive pools (A100-80G, H100-80G, L4-24G), vGPU pools shared by fractional work
(A100-80G, L40S-48G) and a MIG pool (H100-80G, any layout). Every node reports host CPU and
memory (8, 12 or 16 cores and 64, 128 or 192 GiB per card), which the engine counts.

The requests (`draw_requests`), none pinned to a single pool: 45 % fractional vGPU shares of
10-100 % of a card (cores = the share, memory = the share of 48 GiB, or of the model's memory
when pinned), 10 % MIG instances (1g-7g), 45 % whole cards (1/2/4/8 cards, 50/25/15/10 %);
a quarter of the shares and a third of the whole-card requests pinned to one GPU model (one
whose largest node holds the request); every
pod asks CPU and memory. Quotas never bind and preemption is off: placement alone decides.

Figures for the engine's default placer (`Policy()`, the plugin pipeline), FGD
(`Policy(placer="fgd")`) and best-fit (`Policy(placer="best_fit")`) in the same run, same fleet
and same requests:

* engine.alloc_ratio_at_full.<placer>   requests arrive one at a time (`Scheduler.place_one`),
    nothing departs, a request that fits nowhere is dropped; when the demand that arrived
    reaches 100 % of the fleet's GE, allocated GE / fleet GE. Mean over the seeds.
* engine.unallocated_vs_best_fit   (1 - FGD's ratio) / (1 - best-fit's ratio), pooled over the
    seeds (target <= 0.7).
* engine.stranded_gpu_hours_vs_best_fit   a bursty day replayed (`scheduling.engine.replay`):
    arrivals at a base rate with four one-hour bursts at four times it, log-normal runtimes,
    departures; stranded GPU-hours (free GE of a pool while work that could run there, were
    the pool empty, waits for capacity) of the default placer over best-fit, summed over the
    seeds (target <= 0.7); `.fgd` the same for FGD; also the mean allocation
    (`replay.utilisation`) of each, `engine.replay_mean_allocation.<placer>`.
* engine.waiting_ge_hours_vs_best_fit   the same day seen from the queue: every request's GE
    times its wait (arrival to first start, or to the end of the window), the default placer
    over best-fit; `.fgd` for FGD.
* engine.stranded_gpu_hours_best_fit_jitter   best-fit against itself: the same day with every
    arrival `JITTER_SECONDS` later (a quarter cycle, so some arrivals fall into the next cycle),
    over the day as drawn. How far the stranded figure moves when nothing but timing changes:
    the noise a placer's ratio has to clear.

Each figure is printed as a human-readable line and as one JSON line
{"metric": ..., "value": ..., "unit": ...}.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from bench.figures import emit
from scheduling.engine.planner import Scheduler
from scheduling.engine.replay import Submission, Trace, replay
from scheduling.engine.simulate import Start
from scheduling.engine.types import (
    MIG_PROFILES,
    Flavor,
    GpuDevice,
    Node,
    Policy,
    Pool,
    Quota,
    Request,
    Snapshot,
    Team,
)

GIB = 1024
NOW = 1_800_000_000.0
TEAM = "t"
PlacerName = Literal["plugins", "best_fit", "fgd"]
#: The engine's default placer (the plugin pipeline), FGD, and the best-fit baseline.
PLACERS: tuple[PlacerName, ...] = ("plugins", "fgd", "best_fit")
#: The best-fit control replay's arrivals come this much later (see the module docstring).
JITTER_SECONDS = 15.0
SHARE_MEMORY_MIB = 48 * GIB
SHARES = (10, 20, 25, 30, 40, 50, 60, 75, 100)
SHARE_P = (0.14, 0.14, 0.14, 0.1, 0.1, 0.16, 0.06, 0.08, 0.08)
WHOLE = (1, 2, 4, 8)
WHOLE_P = (0.5, 0.25, 0.15, 0.1)
MIG = ("1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")
MIG_P = (0.4, 0.25, 0.15, 0.1, 0.1)

# (pool, sharing, model, card memory GiB, node sizes, share of the fleet's nodes)
POOLS: tuple[tuple[str, str, str, int, tuple[int, ...], float], ...] = (
    ("a100-x", "exclusive", "A100-80G", 80, (4, 8), 0.2),
    ("h100-x", "exclusive", "H100-80G", 80, (8,), 0.1),
    ("l4-x", "exclusive", "L4-24G", 24, (1, 2, 4), 0.15),
    ("a100-v", "vgpu", "A100-80G", 80, (2, 4, 8), 0.25),
    ("l40-v", "vgpu", "L40S-48G", 48, (1, 2, 4), 0.2),
    ("h100-m", "mig", "H100-80G", 80, (4, 8), 0.1),
)
MODELS = {"A100-80G": 80, "H100-80G": 80, "L4-24G": 24, "L40S-48G": 48}
#: Cards on the largest node of each model: a pinned request never asks for more.
LARGEST_NODE = {m: max(max(p[4]) for p in POOLS if p[2] == m) for m in MODELS}


def mixed_fleet(seed: int, nodes: int) -> Snapshot:
    """The heterogeneous fleet described in the module docstring, empty, with open quotas."""
    rng = np.random.default_rng(seed)
    pools = tuple(Pool(name, tier=0, sharing=sharing) for name, sharing, *_ in POOLS)  # type: ignore[arg-type]
    node_list: list[Node] = []
    devices: list[GpuDevice] = []
    for name, sharing, model, mem_gib, sizes, share in POOLS:
        for i in range(max(1, round(nodes * share))):
            cards = int(rng.choice(sizes))
            nid = f"{name}-{i:03d}"
            node_list.append(
                Node(
                    nid,
                    name,
                    model,
                    cpu_millicores=cards * int(rng.choice([8, 12, 16])) * 1000,
                    memory_mib=cards * int(rng.choice([64, 128, 192])) * GIB,
                )
            )
            for k in range(cards):
                devices.append(
                    GpuDevice(nid, k, mem_gib * GIB, mem_gib * GIB, mig_capable=sharing == "mig")
                )
    flavors = (
        Flavor("whole", "whole"),
        *(
            Flavor(
                f"share-{pct}",
                "vgpu",
                memory_mib=SHARE_MEMORY_MIB * pct // 100,
                cores_percent=pct,
                gpu_equivalent=pct / 100,
            )
            for pct in SHARES
        ),
        *(
            Flavor(f"mig-{p}", "mig", mig_profile=p, gpu_equivalent=MIG_PROFILES[p].slices / 7)
            for p in MIG
        ),
    )
    quotas = tuple(Quota(TEAM, f.id, 1e9, 1e9) for f in flavors)
    return Snapshot(
        pools=pools,
        nodes=tuple(node_list),
        devices=tuple(devices),
        flavors=flavors,
        teams=(Team(TEAM),),
        quotas=quotas,
    )


def demand_ge(r: Request) -> float:
    """GE a request asks for: its share, its MIG slices / 7, or its cards."""
    if r.flavor.startswith("share-"):
        return r.vgpu_cores_percent / 100 * r.gpu_count
    if r.flavor.startswith("mig-"):
        return MIG_PROFILES[r.flavor[4:]].slices / 7 * r.gpu_count
    return float(r.gpu_count)


def draw_requests(rng: np.random.Generator, count: int, prefix: str = "r") -> list[Request]:
    """`count` requests of the mix described in the module docstring."""
    out: list[Request] = []
    models = sorted(MODELS)
    share_models = ("A100-80G", "L40S-48G")
    for i in range(count):
        u = rng.random()
        rid = f"{prefix}{i:06d}"
        if u < 0.45:
            pct = int(rng.choice(SHARES, p=SHARE_P))
            pin = str(rng.choice(share_models)) if rng.random() < 0.25 else None
            base = MODELS[pin] * GIB if pin else SHARE_MEMORY_MIB
            out.append(
                Request(
                    rid,
                    TEAM,
                    f"share-{pct}",
                    NOW,
                    kind="inference",
                    pinned_model=pin,
                    vgpu_memory_mib=base * pct // 100,
                    vgpu_cores_percent=pct,
                    cpu_millicores=int(rng.choice([1, 2, 4])) * 1000,
                    memory_mib=int(rng.choice([8, 16, 32])) * GIB,
                )  # fmt: skip
            )
        elif u < 0.55:
            p = str(rng.choice(MIG, p=MIG_P))
            slices = MIG_PROFILES[p].slices
            out.append(
                Request(
                    rid,
                    TEAM,
                    f"mig-{p}",
                    NOW,
                    kind="inference",
                    cpu_millicores=slices * 1000,
                    memory_mib=slices * 8 * GIB,
                )  # fmt: skip
            )
        else:
            n = int(rng.choice(WHOLE, p=WHOLE_P))
            fits = [m for m in models if n <= LARGEST_NODE[m]]
            pin = str(rng.choice(fits)) if rng.random() < 1 / 3 else None
            out.append(
                Request(
                    rid,
                    TEAM,
                    "whole",
                    NOW,
                    kind="training",
                    gpu_count=n,
                    pinned_model=pin,
                    cpu_millicores=n * int(rng.choice([4, 6, 8])) * 1000,
                    memory_mib=n * int(rng.choice([32, 64, 96])) * GIB,
                )  # fmt: skip
            )
    return out


@dataclass(frozen=True, slots=True)
class FillResult:
    capacity_ge: float
    allocated_ge: float
    arrived: int
    admitted: int
    decision_ms: float

    @property
    def ratio(self) -> float:
        return self.allocated_ge / self.capacity_ge


def fill(fleet: Snapshot, arrivals: list[Request], placer: PlacerName) -> FillResult:
    """Arrivals one at a time until the arrived demand reaches the fleet's GE; no departures."""
    capacity = float(len(fleet.devices))
    policy = Policy(placer=placer, enable_preemption=False, enable_backfill=False)
    sched = Scheduler(fleet, policy)
    arrived = admitted = 0
    demand = allocated = 0.0
    t0 = time.perf_counter()
    for r in arrivals:
        if demand >= capacity - 1e-9:
            break
        arrived += 1
        ge = demand_ge(r)
        demand += ge
        if sched.place_one(r, NOW).admission is not None:
            admitted += 1
            allocated += ge
    elapsed = time.perf_counter() - t0
    return FillResult(capacity, allocated, arrived, admitted, elapsed / max(1, arrived) * 1000)


def bursty_day(fleet: Snapshot, seed: int, hours: float, load: float) -> Trace:
    """Arrivals and departures over `hours`: a base rate with four one-hour bursts at four
    times it, sized so the offered work is `load` x the fleet's GE over the window."""
    rng = np.random.default_rng(seed + 77)
    end = NOW + hours * 3600
    capacity = float(len(fleet.devices))
    sample = draw_requests(rng, 4_000, prefix="probe")
    mean_ge = statistics.fmean(demand_ge(r) for r in sample)
    median_runtime = 3600.0
    mean_runtime = median_runtime * float(np.exp(0.8**2 / 2))
    count = int(load * capacity * hours * 3600 / (mean_ge * mean_runtime))
    # Rate profile: 1 outside bursts, 4 inside; four bursts spread over the window.
    bursts = sorted(float(x) for x in rng.uniform(NOW, end - 3600, size=4))
    grid = np.linspace(NOW, end, 2_000)
    rate = np.ones_like(grid)
    for b in bursts:
        rate[(grid >= b) & (grid < b + 3600)] = 4.0
    cdf = np.cumsum(rate)
    cdf /= cdf[-1]
    at = np.sort(np.interp(rng.random(count), cdf, grid))
    requests = draw_requests(rng, count, prefix="s")
    runtimes = np.minimum(rng.lognormal(np.log(median_runtime), 0.8, size=count), 8 * 3600)
    subs = tuple(
        Submission(
            replace(r, submitted_at=float(t), max_runtime_seconds=8 * 3600.0),
            float(t),
            runtime_seconds=float(rt),
        )
        for r, t, rt in zip(requests, at, runtimes, strict=True)
    )
    return Trace(fleet, NOW, end, subs)


def waiting_ge_hours(trace: Trace, starts: Iterable[Start]) -> float:
    """GE x wait summed over the trace's requests (arrival to first start, or to the end)."""
    first: dict[str, float] = {}
    for s in starts:
        first.setdefault(s.request_id, s.at)
    return (
        sum(
            demand_ge(sub.request) * (first.get(sub.request.id, trace.end) - sub.queued_at)
            for sub in trace.submissions
        )
        / 3600
    )


def jittered(trace: Trace, seconds: float) -> Trace:
    """The same trace with every arrival `seconds` later."""
    subs = tuple(
        replace(
            sub,
            request=replace(sub.request, submitted_at=sub.request.submitted_at + seconds),
            queued_at=sub.queued_at + seconds,
        )
        for sub in trace.submissions
    )
    return replace(trace, submissions=subs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="3 seeds, 40 nodes, 6 hours")
    ap.add_argument("--seeds", type=int, default=None, help="seeds (default 5, quick 3)")
    ap.add_argument("--nodes", type=int, default=None, help="nodes (default 120, quick 40)")
    ap.add_argument("--hours", type=float, default=None, help="replay window (default 24)")
    ap.add_argument("--load", type=float, default=1.0, help="replay's offered load")
    ap.add_argument("--cycle-seconds", type=float, default=60.0)
    ap.add_argument("--no-replay", action="store_true", help="the fill benchmark only")
    args = ap.parse_args()
    seeds = range(1, 1 + (args.seeds or (3 if args.quick else 5)))
    nodes = args.nodes or (40 if args.quick else 120)
    hours = args.hours or (6.0 if args.quick else 24.0)
    sample = mixed_fleet(1, nodes)
    print(
        f"mixed fleet: {len(sample.nodes)} nodes, {len(sample.devices)} GPUs in "
        f"{len(sample.pools)} pools (seed 1); seeds {list(seeds)}; load average "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    results: dict[str, list[FillResult]] = {p: [] for p in PLACERS}
    for seed in seeds:
        fleet = mixed_fleet(seed, nodes)
        arrivals = draw_requests(np.random.default_rng(seed + 10), 6 * len(fleet.devices))
        row = []
        for placer in PLACERS:
            res = fill(fleet, arrivals, placer)
            results[placer].append(res)
            row.append(
                f"{placer} {res.ratio:.3f} ({res.admitted}/{res.arrived} admitted, "
                f"{res.decision_ms:.2f} ms/decision)"
            )
        print(f"  seed {seed}: {len(fleet.devices)} GPUs; " + "; ".join(row))
    for placer in PLACERS:
        mean = statistics.fmean(r.ratio for r in results[placer])
        emit(
            f"engine.alloc_ratio_at_full.{placer}",
            mean,
            "ratio",
            f"allocated / capacity when arrived demand reaches 100 %, {placer}: {mean:.4f} "
            f"(per seed {[round(r.ratio, 3) for r in results[placer]]}; decision "
            f"{statistics.fmean(r.decision_ms for r in results[placer]):.2f} ms mean)",
        )
    unalloc = {p: sum(r.capacity_ge - r.allocated_ge for r in results[p]) for p in PLACERS}
    ratio = unalloc["fgd"] / unalloc["best_fit"] if unalloc["best_fit"] > 0 else 1.0
    emit(
        "engine.unallocated_vs_best_fit",
        ratio,
        "ratio",
        f"unallocated GE at full, FGD / best-fit: {unalloc['fgd']:.1f} / "
        f"{unalloc['best_fit']:.1f} = {ratio:.3f} (target <= 0.7)",
    )
    if args.no_replay:
        return
    stranded = dict.fromkeys(PLACERS, 0.0)
    waited = dict.fromkeys(PLACERS, 0.0)
    jitter_stranded = 0.0
    util: dict[str, list[float]] = {p: [] for p in PLACERS}
    for seed in seeds:
        fleet = mixed_fleet(seed, nodes)
        trace = bursty_day(fleet, seed, hours, args.load)
        row = []
        for placer in PLACERS:
            t0 = time.perf_counter()
            day = replay(trace, policy=Policy(placer=placer), cycle_seconds=args.cycle_seconds)
            stranded[placer] += day.stranded_gpu_hours
            ge_hours = waiting_ge_hours(trace, day.starts)
            waited[placer] += ge_hours
            util[placer].append(day.utilisation)
            row.append(
                f"{placer} stranded {day.stranded_gpu_hours:.1f} GPU-h, waited "
                f"{ge_hours:.0f} GE-h, allocation "
                f"{day.utilisation:.3f}, started {day.started}/{day.submitted} "
                f"({time.perf_counter() - t0:.1f} s)"
            )
        control = replay(
            jittered(trace, JITTER_SECONDS),
            policy=Policy(placer="best_fit"),
            cycle_seconds=args.cycle_seconds,
        )
        jitter_stranded += control.stranded_gpu_hours
        row.append(f"best_fit {JITTER_SECONDS:g} s later stranded {control.stranded_gpu_hours:.1f}")
        print(f"  replay seed {seed}: " + "; ".join(row))
    for placer in PLACERS:
        mean = statistics.fmean(util[placer])
        emit(
            f"engine.replay_mean_allocation.{placer}",
            mean,
            "ratio",
            f"mean allocation over the replayed {hours:g} h, {placer}: {mean:.4f}",
        )
    for placer, suffix in (("plugins", ""), ("fgd", ".fgd")):
        s_ratio = stranded[placer] / stranded["best_fit"] if stranded["best_fit"] > 0 else 1.0
        emit(
            f"engine.stranded_gpu_hours_vs_best_fit{suffix}",
            s_ratio,
            "ratio",
            f"stranded GPU-hours over the replay, {placer} / best-fit: {stranded[placer]:.1f} / "
            f"{stranded['best_fit']:.1f} = {s_ratio:.3f} (target <= 0.7)",
        )
        w_ratio = waited[placer] / waited["best_fit"] if waited["best_fit"] > 0 else 1.0
        emit(
            f"engine.waiting_ge_hours_vs_best_fit{suffix}",
            w_ratio,
            "ratio",
            f"GE x wait over the replay, {placer} / best-fit: {waited[placer]:.0f} / "
            f"{waited['best_fit']:.0f} GE-h = {w_ratio:.3f}",
        )
    j_ratio = jitter_stranded / stranded["best_fit"] if stranded["best_fit"] > 0 else 1.0
    emit(
        "engine.stranded_gpu_hours_best_fit_jitter",
        j_ratio,
        "ratio",
        f"stranded GPU-hours, best-fit with arrivals {JITTER_SECONDS:g} s later / as drawn: "
        f"{jitter_stranded:.1f} / {stranded['best_fit']:.1f} = {j_ratio:.3f} (the noise floor)",
    )


if __name__ == "__main__":
    main()
