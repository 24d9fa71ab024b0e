"""The forecast: the queue run forward through the planner, with corrected runtimes."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from scheduling.engine.forecast import (
    DECLARED,
    RatioBand,
    blend,
    expected_end,
    forecast,
    ratio_band,
    simulate_starts,
)
from scheduling.engine.types import Priority, Snapshot

from .builders import alloc, fleet, mig_claim, node, req, whole_claims

NOW = 10_000.0
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def band(mid: float, spread: float = 0.0, samples: int = 50) -> RatioBand:
    """A band whose quantiles rise linearly from mid - spread to mid + spread."""
    lo, hi = max(0.01, mid - spread), min(1.0, mid + spread)
    return RatioBand(tuple(lo + (hi - lo) * i / 10 for i in range(11)), samples)


def full_node(*, started_at: float = 0.0, runtime: float = 8_000.0) -> Snapshot:
    """One 4-card node, all of it held by "busy" from `started_at` for `runtime` declared."""
    return fleet(
        node("n", gpus=4),
        allocations=[
            alloc(
                "busy",
                whole_claims("n", range(4)),
                started_at=started_at,
                max_runtime_seconds=runtime,
            )
        ],
    )


def test_a_request_that_fits_now_is_estimated_now() -> None:
    snap = fleet(node("n", gpus=4), pending=[req("fits", gpu_count=2)])
    (got,) = forecast(snap, now=NOW, bands={}).values()
    assert (got.start_at, got.low_at, got.high_at) == (NOW, NOW, NOW)


def test_a_waiting_request_starts_when_running_work_is_expected_to_end() -> None:
    # "busy" started at 9,000 with 8,000 s declared; its owner's runs take half of it.
    snap = full_node(started_at=9_000.0)
    snap = fleet(
        node("n", gpus=4),
        allocations=snap.allocations,
        pending=[req("next", gpu_count=4, max_runtime_seconds=3_600)],
    )
    got = forecast(snap, now=NOW, bands={"busy": band(0.5, 0.2)}, resolution_seconds=0)["next"]
    assert got.start_at == 9_000.0 + 8_000.0 * 0.5
    assert got.low_at < got.start_at < (got.high_at or 0)
    declared = forecast(snap, now=NOW, bands={}, resolution_seconds=0)["next"]
    assert declared.start_at == 17_000.0  # without history: its declared end


def test_work_that_outlived_its_typical_run_is_expected_later_not_now() -> None:
    running = alloc("busy", whole_claims("n", range(4)), started_at=0.0, max_runtime_seconds=20_000)
    typical = band(0.3, 0.25)  # runs take 5% .. 55% of the declared time, 30% typically
    end = expected_end(running, typical, "mid", NOW)  # it has run 50% already
    assert NOW < end < 20_000.0
    assert (
        expected_end(running, typical, "low", NOW)
        <= end
        <= expected_end(running, typical, "high", NOW)
    )
    # At its declared max it is stopped: it ends now.
    assert expected_end(running, typical, "mid", 20_000.0) == 20_000.0


def test_estimates_follow_the_queue_order_for_equal_requests() -> None:
    pending = [
        req(f"r{i}", gpu_count=4, submitted_at=float(i), max_runtime_seconds=3_600)
        for i in range(5)
    ]
    snap = fleet(
        node("n", gpus=4), allocations=full_node(started_at=9_000.0).allocations, pending=pending
    )
    got = forecast(snap, now=NOW, bands={})
    starts = [got[f"r{i}"].start_at for i in range(5)]
    assert starts == sorted(starts) and len(set(starts)) == 5


def test_targets_stop_the_run_once_they_started_and_steps_are_bounded() -> None:
    pending = [
        req(f"r{i}", gpu_count=4, submitted_at=float(i), max_runtime_seconds=3_600)
        for i in range(5)
    ]
    snap = fleet(
        node("n", gpus=4), allocations=full_node(started_at=9_000.0).allocations, pending=pending
    )
    assert set(forecast(snap, now=NOW, bands={}, targets=("r1",))) == {"r1"}
    starts = simulate_starts(snap, now=NOW, bands={}, max_steps=3)
    assert set(starts) == {"r0", "r1"}  # step 1: nothing; step 2: r0; step 3: r1


def test_a_request_that_can_never_fit_gets_no_estimate() -> None:
    snap = fleet(node("n", gpus=4), pending=[req("too-big", gpu_count=16)])
    assert forecast(snap, now=NOW, bands={}) == {}


def test_mig_slices_free_up_as_instances_end() -> None:
    claims = [mig_claim("m", 0, "7g.80gb", 0)]
    snap = fleet(
        node("m", pool="mig", model="H100-80G", gpus=1),
        allocations=[alloc("big", claims, flavor="m7", started_at=NOW, max_runtime_seconds=1_000)],
        pending=[req("small", flavor="m1", max_runtime_seconds=600)],
    )
    got = forecast(snap, now=NOW, bands={}, resolution_seconds=0)["small"]
    assert got.start_at == NOW + 1_000


def test_a_high_priority_request_behind_in_age_is_estimated_first() -> None:
    pending = [
        req("old", gpu_count=4, submitted_at=0.0, max_runtime_seconds=3_600),
        req(
            "urgent",
            gpu_count=4,
            submitted_at=5.0,
            max_runtime_seconds=3_600,
            priority=Priority.HIGH,
        ),
    ]
    snap = fleet(
        node("n", gpus=4), allocations=full_node(started_at=9_000.0).allocations, pending=pending
    )
    got = forecast(snap, now=NOW, bands={})
    assert got["urgent"].start_at < got["old"].start_at


def test_ratio_band_clamps_to_the_declared_max_and_blend_weighs_by_history() -> None:
    assert ratio_band([]) == DECLARED
    b = ratio_band([0.2, 0.4, 3.0])  # a run past its max counts as its max
    assert b.quantiles[0] == 0.2 and b.quantiles[-1] == 1.0 and b.samples == 3
    little = blend(ratio_band([0.1]))  # one run against the prior's five
    assert little.mid > 0.8
    much = blend(ratio_band([0.1] * 95))
    assert abs(much.mid - (0.1 * 95 + 5) / 100) < 1e-9
    both = blend(ratio_band([0.2] * 10), ratio_band([0.6] * 10), prior_weight=0)
    assert abs(both.mid - 0.4) < 1e-9


@hs.composite
def queues(draw: hs.DrawFn) -> tuple[Snapshot, dict[str, RatioBand]]:
    """A few nodes, some running work, a queue of whole-card requests of one team."""
    nodes = [
        node(f"n{i}", gpus=draw(hs.sampled_from([2, 4, 8]))) for i in range(draw(hs.integers(1, 3)))
    ]
    allocations = []
    bands: dict[str, RatioBand] = {}
    for i, (n, devs) in enumerate(nodes):
        used = draw(hs.integers(0, len(devs)))
        if used:
            rid = f"run{i}"
            allocations.append(
                alloc(
                    rid,
                    whole_claims(n.id, range(used)),
                    started_at=NOW - draw(hs.integers(0, 5_000)),
                    max_runtime_seconds=float(draw(hs.integers(6_000, 20_000))),
                )
            )
            bands[rid] = band(draw(hs.floats(0.1, 0.9)), draw(hs.floats(0.0, 0.3)))
    pending = []
    for j in range(draw(hs.integers(1, 8))):
        rid = f"q{j}"
        pending.append(
            req(
                rid,
                gpu_count=draw(hs.sampled_from([1, 2, 4])),
                submitted_at=float(j),
                max_runtime_seconds=float(draw(hs.integers(600, 10_000))),
            )
        )
        bands[rid] = band(draw(hs.floats(0.1, 0.9)), draw(hs.floats(0.0, 0.3)))
    return fleet(*nodes, allocations=allocations, pending=pending), bands


@SETTINGS
@given(queues())
def test_the_interval_holds_the_estimate_which_is_never_before_now(
    case: tuple[Snapshot, dict[str, RatioBand]],
) -> None:
    snap, bands = case
    for got in forecast(snap, now=NOW, bands=bands).values():
        assert NOW <= got.low_at <= got.start_at
        assert got.high_at is None or got.start_at <= got.high_at


@SETTINGS
@given(queues())
def test_equal_requests_are_estimated_in_queue_order(
    case: tuple[Snapshot, dict[str, RatioBand]],
) -> None:
    snap, bands = case
    # Give every queued request the same shape: then the queue order (age) is the start order.
    pending = tuple(
        req(r.id, gpu_count=2, submitted_at=r.submitted_at, max_runtime_seconds=3_600)
        for r in snap.pending
    )
    same = {**bands, **{r.id: band(0.5) for r in pending}}
    got = forecast(replace(snap, pending=pending), now=NOW, bands=same)
    starts = [got[r.id].start_at for r in pending if r.id in got]
    assert starts == sorted(starts)


@SETTINGS
@given(queues())
def test_the_same_snapshot_gives_the_same_forecast(
    case: tuple[Snapshot, dict[str, RatioBand]],
) -> None:
    snap, bands = case
    assert forecast(snap, now=NOW, bands=bands) == forecast(snap, now=NOW, bands=bands)


def test_an_estimate_asked_a_minute_later_does_not_jump_when_work_outlives_its_history() -> None:
    # Every past run took 40% of its declared 8 h; this one is about to pass 3.2 h.
    declared = 8 * 3_600.0
    every_run_alike = ratio_band([0.4] * 20)
    running = alloc(
        "busy", whole_claims("n", range(4)), started_at=0.0, max_runtime_seconds=declared
    )
    ends = [
        expected_end(running, every_run_alike, "mid", now)
        for now in range(int(0.3 * declared), int(0.5 * declared), 60)
    ]
    steps = [later - earlier for earlier, later in zip(ends, ends[1:], strict=False)]
    # From one minute to the next the expected end moves by minutes, never by hours.
    assert min(steps) >= 0 and max(steps) < 15 * 60
    # Past every run seen it ends between now and its declared end, as before.
    assert expected_end(running, every_run_alike, "mid", 0.5 * declared) == 0.75 * declared
