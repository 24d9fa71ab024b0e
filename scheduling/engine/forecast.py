"""When will it start: run the queue forward through the planner and read off each start.

Work rarely runs its declared max runtime. A `RatioBand` says how long it really runs: the
ratio actual/declared runtime of past runs, as quantiles; its 20%, 50% and 80% points give a
low, a typical and a high value. The caller blends the owner's and the flavor's bands per
request (`blend`).

`forecast(snapshot, now=..., bands=...)` then runs the simulation loop (simulate.py, the one the
policy replay runs) once per band value (low, mid, high):

1. Each running allocation ends at started_at + declared max runtime x ratio, the ratio
   taken among past runs that lasted at least as long as it has run so far (so work that has
   outlived the typical run is expected to end later, not at once). Work at its declared max
   runtime ends now. Queued work arrives now; once admitted it runs declared x ratio.
2. A cycle runs now and at each expected end (ends within `resolution_seconds` of it are
   released in the same cycle), with the live planner and policy, reservations carried over;
   preemption victims leave. It stops once every pending request (or every one of `targets`)
   has started, nothing runs any more, or `max_steps` cycles were simulated.

The point estimate is the start in the "mid" run; the interval is [start in the "low" run,
start in the "high" run], widened to contain the point (a planner need not be monotone in
runtimes). Requests that did not start within the simulated steps get no estimate. Future
arrivals are not known, so work submitted later that outranks a request delays it beyond the
estimate.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from .simulate import Simulation
from .types import Allocation, Policy, Snapshot

Which = Literal["low", "mid", "high"]
#: Ratios below this are treated as this (a run that ended at once still took a moment).
MIN_RATIO = 0.01
#: How many past runs weigh as much as the prior in `blend`.
PRIOR_WEIGHT = 5.0
#: A band keeps the ratio at these shares of the runs: 0%, 10%, ..., 100%.
STEPS = 10
#: The shares of runs that the low, typical and high value stand for.
SHARE: dict[Which, float] = {"low": 0.2, "mid": 0.5, "high": 0.8}


@dataclass(frozen=True, slots=True)
class RatioBand:
    """How actual runtime compares with the declared max: the ratio actual/declared at 0%,
    10%, ..., 100% of past runs (a quantile function, non-decreasing) and the number of runs it
    rests on. The default says: work runs its declared max."""

    quantiles: tuple[float, ...] = (1.0,) * (STEPS + 1)
    samples: int = 0

    def at(self, share: float) -> float:
        """The ratio that `share` (0-1) of runs stay under (interpolated)."""
        pos = min(max(share, 0.0), 1.0) * STEPS
        i = min(int(pos), STEPS - 1)
        lo, hi = self.quantiles[i], self.quantiles[i + 1]
        return lo + (hi - lo) * (pos - i)

    def share_below(self, ratio: float) -> float:
        """The share of runs that ended before reaching `ratio` of their declared runtime."""
        q = self.quantiles
        if ratio < q[0]:
            return 0.0
        if ratio >= q[-1]:
            return 1.0
        for i in range(STEPS):
            if q[i] <= ratio < q[i + 1]:
                return (i + (ratio - q[i]) / (q[i + 1] - q[i])) / STEPS
        return 1.0  # pragma: no cover - the quantiles are non-decreasing

    def value(self, which: Which, elapsed: float = 0.0) -> float:
        """The low, typical or high ratio of a run that has already lasted `elapsed` (as a
        ratio of its declared runtime): among the past runs that lasted at least that long.

        Longer than any run seen, the run ends between now and its declared end. Approaching
        that point, the answer moves there gradually (over the last tenth of the runs and the
        last tenth of the declared runtime before the longest run), so that an estimate asked a
        minute later does not jump from "ends now" to hours away."""
        beyond = {"low": elapsed, "mid": (elapsed + 1.0) / 2, "high": 1.0}[which]
        done = self.share_below(elapsed)
        if done >= 1.0:
            return beyond
        seen = max(elapsed, self.at(done + SHARE[which] * (1.0 - done)))
        trust = min(1.0, (1.0 - done) * STEPS, (self.quantiles[-1] - elapsed) * STEPS)
        return trust * seen + (1.0 - trust) * beyond

    @property
    def mid(self) -> float:
        return self.at(0.5)


DECLARED = RatioBand()


def ratio_band(ratios: Sequence[float]) -> RatioBand:
    """The band of observed actual/declared ratios (each clamped to [MIN_RATIO, 1]: work is
    stopped at its declared max runtime); DECLARED when there are none."""
    if not ratios:
        return DECLARED
    ordered = sorted(min(1.0, max(MIN_RATIO, r)) for r in ratios)
    last = len(ordered) - 1

    def quantile(share: float) -> float:
        pos = share * last
        lo = int(pos)
        hi = min(lo + 1, last)
        return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)

    return RatioBand(tuple(quantile(i / STEPS) for i in range(STEPS + 1)), len(ordered))


def blend(
    *bands: RatioBand | None, prior: RatioBand = DECLARED, prior_weight: float = PRIOR_WEIGHT
) -> RatioBand:
    """The bands (the owner's, the flavor's) averaged share by share, weighted by their
    sample counts, with `prior` weighing as `prior_weight` runs: little history stays close
    to the prior."""
    parts = [(b, float(b.samples)) for b in bands if b is not None and b.samples > 0]
    parts.append((prior, prior_weight))
    total = sum(w for _, w in parts)
    return RatioBand(
        tuple(sum(b.quantiles[i] * w for b, w in parts) / total for i in range(STEPS + 1)),
        sum(b.samples for b, _ in parts[:-1]),
    )


def expected_end(allocation: Allocation, band: RatioBand, which: Which, now: float) -> float:
    """When running work is expected to end (step 1 of the module docstring)."""
    declared = allocation.max_runtime_seconds
    if declared <= 0:
        return now
    elapsed = (now - allocation.started_at) / declared
    if elapsed >= 1.0:
        return now  # at its declared max: stopped now
    return max(now, allocation.started_at + declared * band.value(which, max(elapsed, 0.0)))


@dataclass(frozen=True, slots=True)
class StartForecast:
    """A pending request's estimated start, with the interval around it (epoch seconds).

    `high_at` is None when the pessimistic run did not reach the request within its steps.
    """

    request_id: str
    start_at: float
    low_at: float
    high_at: float | None


def forecast(
    snapshot: Snapshot,
    *,
    now: float,
    bands: Mapping[str, RatioBand],
    policy: Policy | None = None,
    targets: Collection[str] | None = None,
    max_steps: int = 200,
    resolution_seconds: float = 60.0,
    with_interval: bool = True,
) -> dict[str, StartForecast]:
    """Estimated start of each pending request of `snapshot` (see the module docstring).

    `bands` holds the ratio band of running and pending work by request id (DECLARED where
    missing). With `targets`, the simulation stops once those requests have started and only
    they are returned. Without `with_interval` only the typical run is simulated and the
    interval is the point.
    """
    wanted = frozenset(targets) if targets is not None else None

    def run(which: Which) -> dict[str, float]:
        return simulate_starts(
            snapshot,
            now=now,
            bands=bands,
            which=which,
            policy=policy,
            targets=wanted,
            max_steps=max_steps,
            resolution_seconds=resolution_seconds,
        )

    mid = run("mid")
    low = run("low") if with_interval else mid
    high = run("high") if with_interval else mid
    out: dict[str, StartForecast] = {}
    for rid, at in mid.items():
        if wanted is not None and rid not in wanted:
            continue
        hi = high.get(rid)
        out[rid] = StartForecast(
            request_id=rid,
            start_at=at,
            low_at=min(low.get(rid, at), at),
            high_at=max(hi, at) if hi is not None else None,
        )
    return out


def simulate_starts(
    snapshot: Snapshot,
    *,
    now: float,
    bands: Mapping[str, RatioBand],
    which: Which = "mid",
    policy: Policy | None = None,
    targets: frozenset[str] | None = None,
    max_steps: int = 200,
    resolution_seconds: float = 60.0,
) -> dict[str, float]:
    """Start time of each pending request that starts within `max_steps` simulated cycles,
    running work ending at its `which` expected end (steps 1-2 of the module docstring)."""
    sim = Simulation(snapshot, policy or Policy(), max_attempts=1)
    for a in snapshot.allocations:
        sim.running_until(
            a.request_id, expected_end(a, bands.get(a.request_id, DECLARED), which, now)
        )
    for r in snapshot.pending:
        runtime = r.max_runtime_seconds * bands.get(r.id, DECLARED).value(which)
        sim.arrive(r, now, runtime_seconds=runtime)

    def done() -> bool:
        started = {s.request_id for s in sim.starts}
        return not sim.pending or (targets is not None and targets <= started)

    sim.run(origin=now, resolution_seconds=resolution_seconds, max_cycles=max_steps, done=done)
    return {s.request_id: s.at for s in sim.starts}
