"""The sharing report, computed from plain data: no database, no clock (pass the period).

Per pool and period (docs/sharing-report.md says the same in prose):

1. GPU-equivalents sold per physical GPU: GE-hours held by runs inside the period over the
   GPU-hours the pool's cards could give (from when each card existed); also per busy card,
   i.e. over the card-hours in which the card held any work, and the shares (claims) a card
   in use held on average.
2. GPU activity per GPU-equivalent: the GE-hours-weighted mean activity of the runs that have
   utilisation samples in the period.
3. Memory headroom: 1 - (sum of each sampled run's peak memory) / (sum of the memory it held).
4. Stranded GPU-hours: a sweep over every card's claims in time. The free remainder of a card
   that holds work is stranded while no request can use it: it fits none of the pool's flavors,
   or requests waited in the pool and none of them fitted it. Counted as the card share it is.
5. Slowdown and jitter: a finished, succeeded run is *shared* if another run held its card for
   at least half its runtime, *alone* if for less than 5 %. Comparable work has the same
   flavor, GPU count, image, command and kind; a group's baseline is the median runtime of its
   alone runs, and only groups whose alone runs agree (spread within `max_baseline_spread`)
   count. Each shared run's ratio is its runtime over that baseline: the slowdown is the mean
   ratio, the jitter their standard deviation.
6. The verdict line from the thresholds: not enough data, jitter too high, too slow, no gain
   (cards in use held barely more than one share: sharing packed nothing), unsold (less of
   the pool's capacity sold than `min_ge_sold_per_gpu`: whatever sharing packs on the cards in
   use, most cards earn nothing), or sharing pays. The line always says how much is unsold.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime

from scheduling.engine.types import CardUsage

EXCLUSIVE, VGPU, MIG = "exclusive", "vgpu", "mig"
MIG_SLICES = 7
SHARED_AT = 0.5  # a run with neighbours for at least this share of its runtime ran shared
ALONE_BELOW = 0.05  # ... and one with neighbours for less than this share ran alone

PAYS, JITTER, SLOW, NO_GAIN, UNSOLD = "pays", "jitter", "slow", "no_gain", "unsold"
NO_DATA, NOT_SHARED = "no_data", "not_shared"


def mig_slices(profile: str) -> int:
    """Compute slices of a MIG profile: "3g.40gb" -> 3 (1 when the name says none)."""
    head = profile.split("g.", 1)[0]
    return int(head) if "g." in profile and head.isdigit() else 1


@dataclass(frozen=True, slots=True)
class Card:
    """One physical GPU of the pool, from when the portal could count it."""

    node: str
    index: int
    memory_mib: int
    available_from: datetime
    mig_layout: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Shape:
    """What one GPU of a request takes of a card: a whole card, a vGPU share or a MIG slice."""

    whole: bool = False
    memory_mib: int = 0
    cores_percent: int = 0
    mig_profile: str = ""


@dataclass(frozen=True, slots=True)
class Claim:
    """A run's hold on one card."""

    node: str
    index: int
    shape: Shape


@dataclass(frozen=True, slots=True)
class Run:
    """One attempt that ran (an allocation), with what its samples say of it in the period."""

    run_id: int
    pool_id: int
    flavor_id: int
    gpu_count: int
    gpu_equivalent: float  # of all its GPUs
    started_at: datetime
    ended_at: datetime | None  # None: still running
    claims: tuple[Claim, ...] = ()
    image: str = ""
    command: tuple[str, ...] = ()
    kind: str = "job"
    succeeded: bool = False
    memory_held_mib: int = 0  # of all its GPUs
    mean_activity_percent: float | None = None
    peak_memory_mib: int | None = None


@dataclass(frozen=True, slots=True)
class Waiting:
    """A request that waited in the pool's queue over [since, until)."""

    pool_id: int
    since: datetime
    until: datetime
    shape: Shape


@dataclass(frozen=True, slots=True)
class Pool:
    pool_id: int
    name: str
    slug: str
    sharing_mode: str
    cards: tuple[Card, ...]
    flavor_shapes: tuple[Shape, ...]
    is_pilot: bool = False
    pilot_until: date | None = None
    pilot_teams: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Thresholds:
    """When a pool has enough evidence, and how much slowdown and jitter sharing may cost."""

    min_compared_runs: int = 5
    min_baseline_runs: int = 2
    max_baseline_spread: float = 0.10
    max_slowdown: float = 1.25
    max_jitter: float = 0.15
    min_shares_per_busy_gpu: float = 1.1
    min_ge_sold_per_gpu: float = 0.5


@dataclass(frozen=True, slots=True)
class PoolSharing:
    """The report's figures for one pool; None where the period has no data for a figure."""

    pool_id: int
    pool: str
    slug: str
    sharing_mode: str
    is_pilot: bool
    pilot_until: date | None
    pilot_teams: tuple[str, ...]
    gpus: int
    capacity_gpu_hours: float
    busy_gpu_hours: float
    sold_gpu_equivalent_hours: float
    ge_sold_per_gpu: float | None
    unsold_percent: float | None
    ge_sold_per_busy_gpu: float | None
    shares_per_busy_gpu: float | None
    activity_percent_per_ge: float | None
    memory_headroom_percent: float | None
    stranded_gpu_hours: float
    shared_runs: int
    alone_runs: int
    compared_runs: int
    slowdown: float | None
    jitter: float | None
    verdict: str
    verdict_line: str


def _hours(seconds: float) -> float:
    return seconds / 3600.0


def _overlap(start: datetime, end: datetime, lo: datetime, hi: datetime) -> float:
    return max((min(end, hi) - max(start, lo)).total_seconds(), 0.0)


def stranded_share(card: Card, held: Sequence[Shape], wanted: Sequence[Shape]) -> float:
    """The share of `card` (0-1) that is free but fits none of the `wanted` shapes.

    Only a card that holds work strands capacity (a free card is idle, not stranded), and a
    whole card is held or free. vGPU: the free memory and cores, as the smaller of their shares.
    MIG: free slices that are no free instance of a wanted profile (the card's layout decides
    which instances exist; slices outside it are stranded as soon as the card holds work).
    """
    if not held or any(shape.whole for shape in held):
        return 0.0
    if card.mig_layout or any(shape.mig_profile for shape in held):
        used: dict[str, int] = defaultdict(int)
        for shape in held:
            used[shape.mig_profile] += 1
        used_slices = sum(mig_slices(profile) * count for profile, count in used.items())
        free_slices = max(MIG_SLICES - used_slices, 0)
        profiles = {shape.mig_profile for shape in wanted}
        if card.mig_layout:
            usable = sum(
                max(count - used.get(profile, 0), 0) * mig_slices(profile)
                for profile, count in card.mig_layout.items()
                if profile in profiles
            )
        else:  # no layout recorded: any wanted profile that fits the free slices
            smallest = min((mig_slices(p) for p in profiles), default=MIG_SLICES + 1)
            usable = free_slices if free_slices >= smallest else 0
        return max(free_slices - min(usable, free_slices), 0) / MIG_SLICES
    held_usage = sum((_share(shape) for shape in held), CardUsage())
    free_memory, free_cores = held_usage.free_on(card.memory_mib)
    if free_memory <= 0 or free_cores <= 0:
        return 0.0
    if any(held_usage.fits(_share(shape), card.memory_mib) for shape in wanted):
        return 0.0
    return min(free_memory / card.memory_mib, free_cores / 100)


def _share(shape: Shape) -> CardUsage:
    return CardUsage(memory_mib=shape.memory_mib, cores_percent=shape.cores_percent)


@dataclass
class _Sweep:
    busy_seconds: float = 0.0
    share_seconds: float = 0.0  # card-seconds × the shares the card held
    stranded_seconds: float = 0.0  # card-share seconds
    neighbour_seconds: dict[int, float] = field(default_factory=lambda: defaultdict(float))


def _sweep(
    pool: Pool,
    runs: Sequence[Run],
    waiting: Sequence[Waiting],
    start: datetime,
    end: datetime,
) -> _Sweep:
    """Walk the pool's claims and waits in time order (see the module doc, steps 1, 4, 5).

    Neighbour time is counted over each run's whole life; busy and stranded time only inside
    [start, end) and from when each card existed.
    """
    cards = {(card.node, card.index): card for card in pool.cards}
    # (moment, +1 starts / -1 ends, card or None for a wait, run id or wait number, shape)
    events: list[tuple[datetime, int, tuple[str, int] | None, int, Shape]] = []
    for run in runs:
        stop = run.ended_at or end
        for claim in run.claims:
            events.append((run.started_at, 1, (claim.node, claim.index), run.run_id, claim.shape))
            events.append((stop, -1, (claim.node, claim.index), run.run_id, claim.shape))
    for number, wait in enumerate(waiting):
        events.append((wait.since, 1, None, number, wait.shape))
        events.append((wait.until, -1, None, number, wait.shape))
    events.sort(key=lambda event: (event[0], event[1]))
    held: dict[tuple[str, int], dict[tuple[int, int], Shape]] = defaultdict(dict)
    waits: dict[int, Shape] = {}
    sweep = _Sweep()
    serial = 0
    for position, (moment, delta, card_key, number, shape) in enumerate(events):
        if card_key is None:
            if delta > 0:
                waits[number] = shape
            else:
                waits.pop(number, None)
        elif delta > 0:
            serial += 1
            held[card_key][(number, serial)] = shape
        else:
            for token, other in list(held[card_key].items()):
                if token[0] == number and other == shape:
                    del held[card_key][token]
                    break
        if position + 1 == len(events):
            break
        following = events[position + 1][0]
        length = (following - moment).total_seconds()
        if length <= 0:
            continue
        wanted = list(waits.values()) or list(pool.flavor_shapes)
        with_neighbours: set[int] = set()
        for key, holders in held.items():
            if not holders:
                continue
            owners = {token[0] for token in holders}
            if len(owners) > 1:
                with_neighbours |= owners
            card = cards.get(key)
            if card is None:
                continue
            inside = _overlap(moment, following, max(start, card.available_from), end)
            if inside <= 0:
                continue
            sweep.busy_seconds += inside
            sweep.share_seconds += inside * len(holders)
            if pool.sharing_mode != EXCLUSIVE:
                share = stranded_share(card, list(holders.values()), wanted)
                sweep.stranded_seconds += share * inside
        for run_id in with_neighbours:
            sweep.neighbour_seconds[run_id] += length
    return sweep


def _comparable(run: Run) -> tuple[object, ...]:
    return (run.flavor_id, run.gpu_count, run.image, run.command, run.kind)


def _runtime(run: Run) -> float:
    return (run.ended_at - run.started_at).total_seconds() if run.ended_at else 0.0


def _verdict(
    pool: Pool,
    *,
    ge_per_gpu: float | None,
    shares: float | None,
    compared: int,
    slowdown: float | None,
    jitter: float | None,
    thresholds: Thresholds,
) -> tuple[str, str]:
    sold = (
        f"{ge_per_gpu:.2f} GE sold per card ({_unsold_percent(ge_per_gpu):.0f} % unsold)"
        if ge_per_gpu is not None
        else "no capacity"
    )
    if pool.sharing_mode == EXCLUSIVE:
        return NOT_SHARED, f"whole cards, not shared: {sold}"
    if compared < thresholds.min_compared_runs or slowdown is None or jitter is None:
        return NO_DATA, (
            f"not enough data: {compared} comparable run{'s' if compared != 1 else ''} on "
            f"shared cards ({thresholds.min_compared_runs} needed)"
        )
    measured = f"slowdown {slowdown:.2f}× ± {jitter:.2f}"
    if jitter > thresholds.max_jitter:
        return JITTER, f"jitter too high: {measured} (at most ± {thresholds.max_jitter:.2f})"
    if slowdown > thresholds.max_slowdown:
        return SLOW, f"too slow: {measured} (at most {thresholds.max_slowdown:.2f}×)"
    packed = f"{shares or 0:.1f} shares per card in use"
    if shares is None or shares < thresholds.min_shares_per_busy_gpu:
        return NO_GAIN, f"no gain: {packed}, {measured}"
    if ge_per_gpu is None or ge_per_gpu < thresholds.min_ge_sold_per_gpu:
        return UNSOLD, (
            f"does not pay yet: {sold}, at least {thresholds.min_ge_sold_per_gpu:.2f} needed; "
            f"{packed}, {measured}"
        )
    return PAYS, f"sharing pays: {sold}, {packed}, {measured}"


def _unsold_percent(ge_per_gpu: float) -> float:
    """The share of the pool's capacity that no run bought, in percent."""
    return max(0.0, 100.0 * (1.0 - ge_per_gpu))


def _ratio(numerator: float, denominator: float, scale: float = 1.0) -> float | None:
    return numerator * scale / denominator if denominator > 0 else None


def _round(value: float | None, places: int) -> float | None:
    return round(value, places) if value is not None else None


def sharing_report(
    *,
    pools: Sequence[Pool],
    runs: Sequence[Run],
    waiting: Sequence[Waiting] = (),
    start: datetime,
    end: datetime,
    thresholds: Thresholds | None = None,
) -> list[PoolSharing]:
    """The sharing figures and verdict of each pool over [start, end).

    `runs` are every attempt that overlaps the period (and those before it that may have shared
    a card with them); runs that never reach the period only count as neighbours. Baselines of
    comparable work are taken from the runs of every pool given.
    """
    thresholds = thresholds or Thresholds()
    by_pool: dict[int, list[Run]] = defaultdict(list)
    for run in runs:
        by_pool[run.pool_id].append(run)
    sweeps = {
        pool.pool_id: _sweep(
            pool,
            by_pool[pool.pool_id],
            [w for w in waiting if w.pool_id == pool.pool_id],
            start,
            end,
        )
        for pool in pools
    }
    # Classify finished, succeeded runs that ended in the period as shared or alone.
    alone: dict[tuple[object, ...], list[float]] = defaultdict(list)
    shared: dict[int, list[tuple[tuple[object, ...], float]]] = defaultdict(list)
    alone_count: dict[int, int] = defaultdict(int)
    for pool in pools:
        sweep = sweeps[pool.pool_id]
        for run in by_pool[pool.pool_id]:
            runtime = _runtime(run)
            if not (run.succeeded and run.claims and runtime > 0):
                continue
            if run.ended_at is None or not start <= run.ended_at <= end:
                continue
            with_neighbours = sweep.neighbour_seconds.get(run.run_id, 0.0) / runtime
            if with_neighbours >= SHARED_AT:
                shared[pool.pool_id].append((_comparable(run), runtime))
            elif with_neighbours < ALONE_BELOW:
                alone[_comparable(run)].append(runtime)
                alone_count[pool.pool_id] += 1
    baselines: dict[tuple[object, ...], float] = {}
    for key, runtimes in alone.items():
        if len(runtimes) < thresholds.min_baseline_runs:
            continue
        median = statistics.median(runtimes)
        if statistics.pstdev(runtimes) / median <= thresholds.max_baseline_spread:
            baselines[key] = median
    out = []
    for pool in pools:
        sweep = sweeps[pool.pool_id]
        capacity = sum(
            _overlap(start, end, max(start, card.available_from), end) for card in pool.cards
        )
        sold = active = measured = peak = memory = 0.0
        for run in by_pool[pool.pool_id]:
            inside = _overlap(run.started_at, run.ended_at or end, start, end)
            if inside <= 0:
                continue
            ge_seconds = run.gpu_equivalent * inside
            sold += ge_seconds
            if run.mean_activity_percent is not None:
                measured += ge_seconds
                active += ge_seconds * run.mean_activity_percent
            if run.peak_memory_mib is not None and run.memory_held_mib > 0:
                peak += run.peak_memory_mib
                memory += run.memory_held_mib
        ratios = [
            runtime / baselines[key] for key, runtime in shared[pool.pool_id] if key in baselines
        ]
        slowdown = statistics.fmean(ratios) if ratios else None
        jitter = statistics.pstdev(ratios) if ratios else None
        ge_per_gpu = _ratio(sold, capacity)
        shares = _ratio(sweep.share_seconds, sweep.busy_seconds)
        verdict, line = _verdict(
            pool,
            ge_per_gpu=ge_per_gpu,
            shares=shares,
            compared=len(ratios),
            slowdown=slowdown,
            jitter=jitter,
            thresholds=thresholds,
        )
        headroom = _ratio(memory - peak, memory, 100.0)
        out.append(
            PoolSharing(
                pool_id=pool.pool_id,
                pool=pool.name,
                slug=pool.slug,
                sharing_mode=pool.sharing_mode,
                is_pilot=pool.is_pilot,
                pilot_until=pool.pilot_until,
                pilot_teams=pool.pilot_teams,
                gpus=len(pool.cards),
                capacity_gpu_hours=round(_hours(capacity), 2),
                busy_gpu_hours=round(_hours(sweep.busy_seconds), 2),
                sold_gpu_equivalent_hours=round(_hours(sold), 2),
                ge_sold_per_gpu=_round(ge_per_gpu, 3),
                unsold_percent=(
                    round(_unsold_percent(ge_per_gpu), 1) if ge_per_gpu is not None else None
                ),
                ge_sold_per_busy_gpu=_round(_ratio(sold, sweep.busy_seconds), 3),
                shares_per_busy_gpu=_round(shares, 2),
                activity_percent_per_ge=_round(_ratio(active, measured), 1),
                memory_headroom_percent=_round(headroom, 1),
                stranded_gpu_hours=round(_hours(sweep.stranded_seconds), 2),
                shared_runs=len(shared[pool.pool_id]),
                alone_runs=alone_count[pool.pool_id],
                compared_runs=len(ratios),
                slowdown=_round(slowdown, 3),
                jitter=_round(jitter, 3),
                verdict=verdict,
                verdict_line=line,
            )
        )
    return out
