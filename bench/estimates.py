"""How good are start estimates? Replay a generated week through the engine and compare.

The trace (seeded, `numpy.random.default_rng`): a fleet of 8 A100 nodes x 8 cards (whole-card
pool) and 2 H100 nodes x 8 cards in MIG mode; 5 teams of 5 owners with guaranteed quotas and
limits; arrivals over `--days` days (Poisson with a day/night swing, offered load `--load`,
0.9 by default, of the capacity in GPU-equivalent hours); declared max runtimes of 30 min to
24 h; the actual runtime is the declared one times a ratio drawn around the owner's own habit
(each owner's typical ratio is fixed between 0.15 and 0.9; 10% of runs fail early), so actual
runtimes are shorter than declared, as in recorded traces.

The replay ("live"): at every arrival and every end one planning cycle of the engine runs on
the fleet as it then is (the real planner, default policy); a request starts when a cycle
admits it. At each submission, before that cycle, three estimates of its start are made from
what is known then (the running work, the queue, the finished runs' history):

* `forecast`: scheduling/engine/forecast.py with ratio bands blended from the owner's and the
  flavor's finished runs (as the portal does);
* `declared`: the same forward simulation with every run taking its declared max runtime (no
  correction);
* `pool_median`: submission time plus the median wait of the pool's admissions of the last 7
  days (the estimate the portal showed before).
* `known_runtimes` (a yardstick, not an estimator): the forecast told every run's actual
  runtime; what it still misses comes from what the forecast cannot know at submission (work
  submitted later, preemptions), not from runtimes.

Printed figures (JSON lines, like the other benches): `estimates.within_25pct` is the share of
requests scored whose actual wait fell within +-25% of the estimated wait, or within 2 minutes
(max(0.25 x estimate, 120 s)); `estimates.median_abs_error_seconds` the median of
|actual - estimated start|. Both for all scored requests and for those that waited (actual or
estimated wait over 2 minutes), plus the interval's coverage and the forecast's time per
submission. `estimates.waited_within_25pct` is the headline on the requests that did not
start in the cycle of their submission, a set fixed by the replay alone; a request not started
by the end of the trace's arrivals (the horizon) counts as a miss; the declared and pool-median
estimators are scored on the same requests. Requests submitted during the first day
(warm-up: empty fleet, no history) are not scored.
"""

from __future__ import annotations

import argparse
import heapq
import math
import statistics
import time
from dataclasses import dataclass, replace

import numpy as np

from bench.figures import emit
from scheduling.engine.forecast import DECLARED, RatioBand, blend, forecast, ratio_band
from scheduling.engine.planner import Scheduler
from scheduling.engine.types import (
    MIG_PROFILES,
    Allocation,
    DeviceClaim,
    Flavor,
    GpuDevice,
    Node,
    Policy,
    Pool,
    Priority,
    Quota,
    Request,
    Snapshot,
    Team,
    mig_bits,
)

DAY = 86_400.0
T0 = 1_800_000_000.0
MEM = 81_920
TEAMS = 5
OWNERS_PER_TEAM = 5
DECLARED_HOURS = (0.5, 1.0, 2.0, 4.0, 8.0, 12.0, 24.0)
DECLARED_P = (0.10, 0.20, 0.20, 0.20, 0.15, 0.08, 0.07)
SHORT_WAIT_SECONDS = 120.0
WINDOW_SECONDS = 7 * DAY
LOAD = 0.9


def build_fleet() -> tuple[tuple[Pool, ...], tuple[Node, ...], tuple[GpuDevice, ...]]:
    pools = (Pool("a100", tier=0), Pool("h100-mig", tier=1, sharing="mig"))
    nodes: list[Node] = []
    devices: list[GpuDevice] = []
    for i in range(8):
        nodes.append(Node(f"a100-{i}", "a100", "A100-80G"))
        devices += [GpuDevice(f"a100-{i}", d, MEM, MEM) for d in range(8)]
    for i in range(2):
        nodes.append(Node(f"h100-{i}", "h100-mig", "H100-80G"))
        devices += [GpuDevice(f"h100-{i}", d, MEM, MEM, mig_capable=True) for d in range(8)]
    return pools, tuple(nodes), tuple(devices)


FLAVORS = (
    Flavor("a100", "whole", "A100-80G"),
    Flavor("h100-1g", "mig", "H100-80G", mig_profile="1g.10gb", gpu_equivalent=1 / 7),
    Flavor("h100-3g", "mig", "H100-80G", mig_profile="3g.40gb", gpu_equivalent=3 / 7),
)
POOL_OF = {"a100": "a100", "h100-1g": "h100-mig", "h100-3g": "h100-mig"}


@dataclass(frozen=True, slots=True)
class Job:
    request: Request
    owner: str
    actual_seconds: float


def generate_trace(seed: int, days: float, load: float = LOAD) -> list[Job]:
    """Arrivals over `days` days at `load` offered load (see the module docstring)."""
    rng = np.random.default_rng(seed)
    owners = [f"t{t}-u{u}" for t in range(TEAMS) for u in range(OWNERS_PER_TEAM)]
    habit = {o: float(rng.uniform(0.15, 0.9)) for o in owners}
    owner_weight = rng.dirichlet(np.ones(len(owners)) * 2.0)

    def shape() -> tuple[str, int]:
        if rng.random() < 0.7:
            return "a100", int(rng.choice((1, 2, 4, 8), p=(0.6, 0.2, 0.12, 0.08)))
        return ("h100-1g" if rng.random() < 0.7 else "h100-3g"), 1

    # Mean GE-hours actually used per request, to set the arrival rate for the target load.
    mean_count = 0.7 * (0.6 + 0.4 + 0.48 + 0.64) + 0.3 * (0.7 / 7 + 0.3 * 3 / 7)
    mean_hours = sum(h * p for h, p in zip(DECLARED_HOURS, DECLARED_P, strict=True)) * 0.5
    capacity_ge = 64 + 16
    rate_per_second = load * capacity_ge / (mean_count * mean_hours) / 3600
    jobs: list[Job] = []
    t = T0
    end = T0 + days * DAY
    i = 0
    while True:
        # Thinning: day/night swing of +-40% around the mean rate.
        t += float(rng.exponential(1 / (rate_per_second * 1.4)))
        if t >= end:
            break
        swing = 1 + 0.4 * math.sin(2 * math.pi * (t - T0) / DAY)
        if rng.random() > swing / 1.4:
            continue
        owner = owners[int(rng.choice(len(owners), p=owner_weight))]
        flavor, count = shape()
        declared = 3600 * float(rng.choice(DECLARED_HOURS, p=DECLARED_P))
        if rng.random() < 0.1:
            ratio = float(rng.uniform(0.005, 0.08))  # failed early
        else:
            ratio = float(np.clip(habit[owner] * rng.lognormal(0, 0.25), 0.02, 1.0))
        prio = Priority.HIGH if rng.random() < 0.1 else Priority.NORMAL
        i += 1
        jobs.append(
            Job(
                Request(
                    id=f"r{i:05d}",
                    team=owner.split("-")[0],
                    flavor=flavor,
                    submitted_at=t,
                    gpu_count=count,
                    priority=prio,
                    max_runtime_seconds=declared,
                ),
                owner,
                declared * ratio,
            )
        )
    return jobs


class History:
    """Finished runs' actual/declared ratios by owner and by flavor, as the portal keeps them."""

    def __init__(self) -> None:
        self.by_owner: dict[str, list[float]] = {}
        self.by_flavor: dict[str, list[float]] = {}
        self.all: list[float] = []
        self._bands: dict[str, RatioBand] | None = None

    def add(self, owner: str, flavor: str, ratio: float) -> None:
        self.by_owner.setdefault(owner, []).append(ratio)
        self.by_flavor.setdefault(flavor, []).append(ratio)
        self.all.append(ratio)
        self._bands = None

    def band(self, owner: str, flavor: str) -> RatioBand:
        if self._bands is None:
            self._bands = {}
        key = f"{owner}|{flavor}"
        hit = self._bands.get(key)
        if hit is None:
            hit = self._bands[key] = blend(
                ratio_band(self.by_owner.get(owner, [])),
                ratio_band(self.by_flavor.get(flavor, [])),
            )
        return hit


@dataclass
class Estimate:
    submitted_at: float
    forecast_at: float | None
    low_at: float | None
    high_at: float | None
    declared_at: float | None
    median_at: float | None
    # Yardstick, not an estimator: the forecast told every run's actual runtime.
    exact_at: float | None = None


class Replay:
    """The live side: device state, running work, the queue, one engine cycle per event."""

    def __init__(self, jobs: list[Job]) -> None:
        self.pools, self.nodes, devices = build_fleet()
        self.devices = {(d.node_id, d.index): d for d in devices}
        self.teams = tuple(Team(f"t{t}", cohort="org") for t in range(TEAMS))
        # Guaranteed: a fifth of each flavor's capacity (in GE) per team; limit: twice that.
        self.quotas = tuple(
            Quota(team.name, f.id, cap / TEAMS * 1.0, cap / TEAMS * 2.0)
            for team in self.teams
            for f, cap in ((FLAVORS[0], 64.0), (FLAVORS[1], 16.0), (FLAVORS[2], 16.0))
        )
        self.jobs = {j.request.id: j for j in jobs}
        self.running: dict[str, Allocation] = {}
        self.pending: dict[str, Request] = {}
        self.started: dict[str, float] = {}
        self.history = History()
        self.admissions: dict[str, list[tuple[float, float]]] = {}  # pool -> (at, wait)
        self.preempted = 0
        self.policy = Policy()

    def snapshot(self, pending: tuple[Request, ...]) -> Snapshot:
        return Snapshot(
            pools=self.pools,
            nodes=self.nodes,
            devices=tuple(self.devices.values()),
            flavors=FLAVORS,
            teams=self.teams,
            quotas=self.quotas,
            allocations=tuple(self.running.values()),
            pending=pending,
        )

    def _claims(self, claims: tuple[DeviceClaim, ...], take: bool) -> None:
        for c in claims:
            key = (c.node_id, c.device_index)
            d = self.devices[key]
            if c.mig_profile in MIG_PROFILES and c.mig_start is not None:
                bits = mig_bits(str(c.mig_profile), c.mig_start)
                mask = d.mig_used_mask | bits if take else d.mig_used_mask & ~bits
                self.devices[key] = replace(d, mig_used_mask=mask)
            else:
                self.devices[key] = replace(d, whole_allocated=take)

    def cycle(self, now: float, events: list[tuple[float, int, str]]) -> None:
        plan = Scheduler(self.snapshot(tuple(self.pending.values())), self.policy).plan(now)
        for pre in plan.preemptions:  # work on borrowed quota: back to the queue, same age
            victim = self.running.pop(pre.victim_id, None)
            if victim is not None:
                self._claims(victim.placement, take=False)
                self.pending[victim.request_id] = self.jobs[victim.request_id].request
                self.preempted += 1
        for adm in plan.admissions:
            request = self.pending.pop(adm.request_id)
            flavor = next(f for f in FLAVORS if f.id == request.flavor)
            self.running[request.id] = Allocation(
                request_id=request.id,
                team=request.team,
                flavor=request.flavor,
                gpu_equivalents=request.gpu_count * flavor.gpu_equivalent,
                placement=adm.placement,
                started_at=now,
                max_runtime_seconds=request.max_runtime_seconds,
                priority=request.priority,
                borrowed=adm.borrowed,
                preemptible=adm.preemptible,
            )
            self._claims(adm.placement, take=True)
            self.started.setdefault(request.id, now)  # the first start counts
            pool = POOL_OF[request.flavor]
            self.admissions.setdefault(pool, []).append((now, now - request.submitted_at))
            job = self.jobs[request.id]
            heapq.heappush(events, (now + job.actual_seconds, 0, request.id))

    def end(self, rid: str, at: float) -> None:
        alloc = self.running.get(rid)
        if alloc is None or alloc.started_at + self.jobs[rid].actual_seconds != at:
            return  # preempted since: this end belongs to an earlier attempt
        del self.running[rid]
        self._claims(alloc.placement, take=False)
        job = self.jobs[rid]
        self.history.add(
            job.owner, job.request.flavor, job.actual_seconds / alloc.max_runtime_seconds
        )

    def bands(self) -> dict[str, RatioBand]:
        out: dict[str, RatioBand] = {}
        for rid in (*self.running, *self.pending):
            job = self.jobs[rid]
            out[rid] = self.history.band(job.owner, job.request.flavor)
        return out

    def exact_bands(self, new: str) -> dict[str, RatioBand]:
        """Each run's own actual/declared ratio, as if runtimes were known in advance."""
        out: dict[str, RatioBand] = {}
        for rid in (*self.running, *self.pending, new):
            job = self.jobs[rid]
            ratio = job.actual_seconds / job.request.max_runtime_seconds
            out[rid] = RatioBand((ratio,) * len(DECLARED.quantiles), 1)
        return out

    def pool_median(self, pool: str, now: float) -> float | None:
        waits = [w for at, w in self.admissions.get(pool, []) if at > now - WINDOW_SECONDS]
        return statistics.median(waits) if waits else None


def run(
    seed: int, days: float, load: float = LOAD
) -> tuple[dict[str, Estimate], dict[str, float], list[float]]:
    jobs = generate_trace(seed, days, load)
    replay = Replay(jobs)
    events: list[tuple[float, int, str]] = [(j.request.submitted_at, 1, j.request.id) for j in jobs]
    heapq.heapify(events)
    estimates: dict[str, Estimate] = {}
    forecast_seconds: list[float] = []
    while events:
        now = events[0][0]
        while events and events[0][0] == now:
            at, kind, rid = heapq.heappop(events)
            if kind == 0:
                replay.end(rid, at)
                continue
            request = replay.jobs[rid].request
            snap = replay.snapshot((*replay.pending.values(), request))
            bands = replay.bands()
            bands[rid] = replay.history.band(replay.jobs[rid].owner, request.flavor)
            started = time.perf_counter()
            got = forecast(snap, now=now, bands=bands, targets=(rid,)).get(rid)
            forecast_seconds.append(time.perf_counter() - started)
            declared = forecast(snap, now=now, bands={}, targets=(rid,), with_interval=False)
            exact = forecast(
                snap, now=now, bands=replay.exact_bands(rid), targets=(rid,), with_interval=False
            )
            median = replay.pool_median(POOL_OF[request.flavor], now)
            estimates[rid] = Estimate(
                submitted_at=now,
                forecast_at=got.start_at if got else None,
                low_at=got.low_at if got else None,
                high_at=got.high_at if got else None,
                declared_at=declared[rid].start_at if rid in declared else None,
                median_at=now + median if median is not None else None,
                exact_at=exact[rid].start_at if rid in exact else None,
            )
            replay.pending[rid] = request
        replay.cycle(now, events)
    return estimates, replay.started, forecast_seconds


def within(actual_wait: float, estimated_wait: float) -> bool:
    """Within +-25% of the estimated wait, or within 2 minutes for short waits."""
    return abs(actual_wait - estimated_wait) <= max(0.25 * estimated_wait, SHORT_WAIT_SECONDS)


def covered(est: Estimate, started_at: float) -> bool:
    """Whether the actual start fell in the estimated interval (give or take 2 minutes)."""
    if est.low_at is None:
        return False
    high = est.high_at if est.high_at is not None else math.inf
    return est.low_at - SHORT_WAIT_SECONDS <= started_at <= high + SHORT_WAIT_SECONDS


def score(
    estimates: dict[str, Estimate], started: dict[str, float], pick: str, *, waited_only: bool
) -> tuple[float, float, int]:
    """(share within, median absolute error in seconds, requests scored) for one estimator."""
    hits: list[bool] = []
    errors: list[float] = []
    for rid, est in estimates.items():
        at = getattr(est, pick)
        if rid not in started or est.submitted_at < T0 + DAY:
            continue
        actual_wait = started[rid] - est.submitted_at
        # No estimate at all counts as a miss, with the error of guessing "now".
        estimated_wait = (at - est.submitted_at) if at is not None else 0.0
        if waited_only and max(actual_wait, estimated_wait) <= SHORT_WAIT_SECONDS:
            continue
        hits.append(at is not None and within(actual_wait, estimated_wait))
        errors.append(abs(actual_wait - estimated_wait))
    if not hits:
        return 0.0, 0.0, 0
    return sum(hits) / len(hits), statistics.median(errors), len(hits)


@dataclass(frozen=True, slots=True)
class WaitedScore:
    """One estimator on the requests that waited: hits, and where the misses went."""

    scored: int
    hits: int
    never_started: int  # not started within the horizon: a miss
    no_estimate: int
    early: int  # started before the estimate's band (estimate too pessimistic)
    late: int  # started after it (estimate too optimistic)

    @property
    def share(self) -> float:
        return self.hits / self.scored if self.scored else 0.0


def waited_score(
    estimates: dict[str, Estimate], started: dict[str, float], pick: str, *, horizon: float
) -> WaitedScore:
    """Score `pick` over the requests that waited, never-started ones counted as misses.

    A request waited when it did not start in the cycle of its submission: it started later,
    or not before `horizon` (the end of the trace's arrivals), which is a miss whatever its
    estimate. The set depends on the replay alone, not on the estimator, so every estimator is
    scored on the same requests. A request without an estimate is a miss too.
    """
    hits = scored = never = none = early = late = 0
    for rid, est in estimates.items():
        if est.submitted_at < T0 + DAY:
            continue
        start = started.get(rid)
        if start is not None and start <= est.submitted_at:
            continue  # started at once
        scored += 1
        if start is None or start > horizon:
            never += 1
            continue
        at = getattr(est, pick)
        if at is None:
            none += 1
            continue
        actual_wait = start - est.submitted_at
        estimated_wait = at - est.submitted_at
        if within(actual_wait, estimated_wait):
            hits += 1
        elif actual_wait < estimated_wait:
            early += 1
        else:
            late += 1
    return WaitedScore(scored, hits, never, none, early, late)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--load", type=float, default=LOAD, help="offered load, 0-1")
    args = parser.parse_args()
    started_at = time.perf_counter()
    estimates, started, forecast_seconds = run(args.seed, args.days, args.load)
    wall = time.perf_counter() - started_at
    scored = [rid for rid, e in estimates.items() if rid in started and e.submitted_at >= T0 + DAY]
    waits = [started[rid] - estimates[rid].submitted_at for rid in scored]
    print(
        f"trace: seed {args.seed}, {args.days:g} days, load {args.load:g}, "
        f"{len(estimates)} submissions, "
        f"{len(started)} started, {len(scored)} scored after the first day; "
        f"wait p50 {statistics.median(waits):.0f} s, p90 {np.percentile(waits, 90):.0f} s, "
        f"{sum(w > SHORT_WAIT_SECONDS for w in waits)} waited over 2 min; replay {wall:.1f} s"
    )
    for pick, name in (
        ("forecast_at", "forecast"),
        ("declared_at", "declared"),
        ("median_at", "pool_median"),
    ):
        for waited_only, suffix in ((False, ""), (True, "_waited")):
            share, error, n = score(estimates, started, pick, waited_only=waited_only)
            print(
                f"{name:12s} {'waited' if waited_only else 'all':6s}: {share:.3f} within 25% "
                f"or 2 min, median |error| {error:.0f} s over {n} requests"
            )
            prefix = "estimates" if name == "forecast" else f"estimates.{name}"
            emit(f"{prefix}.within_25pct{suffix}", share, "share")
            emit(f"{prefix}.median_abs_error_seconds{suffix}", error, "s")
    for pick, name in (
        ("forecast_at", "forecast"),
        ("declared_at", "declared"),
        ("median_at", "pool_median"),
        ("exact_at", "known_runtimes"),
    ):
        w = waited_score(estimates, started, pick, horizon=T0 + args.days * DAY)
        print(
            f"{name:12s} on the {w.scored} requests that did not start at once: {w.share:.3f} "
            f"within 25% or 2 min; misses: {w.late} started later than estimated, {w.early} "
            f"earlier, {w.no_estimate} without an estimate, {w.never_started} not started by "
            "the end of the arrivals"
        )
        prefix = "estimates" if name == "forecast" else f"estimates.{name}"
        emit(f"{prefix}.waited_within_25pct", w.share, "share")
    signed = [
        (e.forecast_at - e.submitted_at) - (started[rid] - e.submitted_at)
        for rid in scored
        if (e := estimates[rid]).forecast_at is not None
        and max(started[rid], e.forecast_at) - e.submitted_at > SHORT_WAIT_SECONDS
    ]
    if signed:
        p10, p25, p50, p75, p90 = np.percentile(signed, [10, 25, 50, 75, 90])
        print(
            f"forecast - actual start on work that waited (s): p10 {p10:.0f}, p25 {p25:.0f}, "
            f"median {p50:.0f}, p75 {p75:.0f}, p90 {p90:.0f} (negative: started later)"
        )
    inside = [covered(estimates[rid], started[rid]) for rid in scored]
    coverage = sum(inside) / len(inside) if inside else 0.0
    print(f"interval [low, high] (+-2 min) holds the actual start for {coverage:.3f}")
    emit("estimates.interval_coverage", coverage, "share")
    ms = sorted(s * 1000 for s in forecast_seconds)
    print(
        f"forecast per submission (3 runs, stopping when the request starts): "
        f"p50 {statistics.median(ms):.1f} ms, p95 {ms[int(0.95 * (len(ms) - 1))]:.1f} ms"
    )
    emit("estimates.forecast_ms_p50", statistics.median(ms), "ms")


if __name__ == "__main__":
    main()
