"""The sharing report's pure computation on crafted pools, runs and waits (no database)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from accounting.sharing_report import (
    JITTER,
    NO_DATA,
    NO_GAIN,
    NOT_SHARED,
    PAYS,
    SLOW,
    UNSOLD,
    Card,
    Claim,
    Pool,
    PoolSharing,
    Run,
    Shape,
    Thresholds,
    Waiting,
    sharing_report,
    stranded_share,
)

T0 = datetime(2026, 11, 2, tzinfo=UTC)
H = 3600
SIX = Shape(memory_mib=6000, cores_percent=25)
TWELVE = Shape(memory_mib=12000, cores_percent=50)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def card(index: int, **kwargs: object) -> Card:
    return Card("n1", index, kwargs.pop("memory_mib", 24000), T0, **kwargs)  # type: ignore[arg-type]


def vgpu_pool(**kwargs: object) -> Pool:
    return Pool(1, "L4 vGPU", "l4", "vgpu", (card(0), card(1)), (SIX, TWELVE), **kwargs)  # type: ignore[arg-type]


def run(
    run_id: int,
    start: float,
    end: float,
    index: int,
    *,
    shape: Shape = SIX,
    flavor: int = 1,
    image: str = "bench",
    ge: float = 0.25,
    **kwargs: object,
) -> Run:
    return Run(
        run_id=run_id,
        pool_id=kwargs.pop("pool_id", 1),  # type: ignore[arg-type]
        flavor_id=flavor,
        gpu_count=1,
        gpu_equivalent=ge,
        started_at=at(start),
        ended_at=at(end),
        claims=(Claim("n1", index, shape),),
        image=image,
        command=("run",),
        succeeded=kwargs.pop("succeeded", True),  # type: ignore[arg-type]
        memory_held_mib=shape.memory_mib,
        **kwargs,  # type: ignore[arg-type]
    )


# Two alone runs of the benchmark on card 0 (1 h each); on card 1 a data-prep neighbour for
# 4 h, beside which the benchmark ran 1.1 h and 1.3 h; a 12 GB request waits for an hour.
RUNS = [
    run(1, 0, H, 0, mean_activity_percent=50.0, peak_memory_mib=3000),
    run(2, 2 * H, 3 * H, 0),
    run(3, 4 * H, 8 * H, 1, shape=TWELVE, flavor=2, image="prep", ge=0.5,
        mean_activity_percent=80.0, peak_memory_mib=9000),
    run(4, 4 * H, 4 * H + 3960, 1),
    run(5, 6 * H, 6 * H + 4680, 1),
]  # fmt: skip
WAITS = [Waiting(1, at(4 * H), at(5 * H), TWELVE)]


def report(
    runs: list[Run] = RUNS, pool: Pool | None = None, end: float = 8 * H, **thresholds: float
) -> PoolSharing:
    (one,) = sharing_report(
        pools=[pool or vgpu_pool()],
        runs=runs,
        waiting=WAITS,
        start=T0,
        end=at(end),
        thresholds=Thresholds(**{"min_compared_runs": 2, **thresholds}),  # type: ignore[arg-type]
    )
    return one


def test_figures_of_a_crafted_vgpu_pool_are_exact() -> None:
    one = report(min_ge_sold_per_gpu=0.15)
    assert one.gpus == 2
    assert one.capacity_gpu_hours == 16.0
    assert one.sold_gpu_equivalent_hours == 3.1  # 0.25 + 0.25 + 0.5 × 4 + 0.25 × 1.1 + 0.25 × 1.3
    assert one.ge_sold_per_gpu == pytest.approx(3.1 / 16, abs=1e-3)
    assert one.unsold_percent == 80.6  # 100 × (1 - 3.1 / 16)
    assert one.busy_gpu_hours == 6.0  # card 0 for 2 h, card 1 for 4 h
    assert one.ge_sold_per_busy_gpu == pytest.approx(3.1 / 6, abs=1e-3)
    assert one.shares_per_busy_gpu == 1.4  # (1 + 1 + 4 + 1.1 + 1.3) share-hours / 6 h
    assert one.activity_percent_per_ge == 76.7  # (0.25 × 50 + 2 × 80) / 2.25
    assert one.memory_headroom_percent == 33.3  # 1 - (3000 + 9000) / (6000 + 12000)
    # While the 12 GB request waited, card 1 had 6 GB and 25 % free: a quarter card for 1 h.
    assert one.stranded_gpu_hours == 0.25
    assert (one.shared_runs, one.alone_runs, one.compared_runs) == (3, 2, 2)
    assert one.slowdown == 1.2
    assert one.jitter == 0.1
    assert one.verdict == PAYS
    assert one.verdict_line == (
        "sharing pays: 0.19 GE sold per card (81 % unsold), 1.4 shares per card in use, "
        "slowdown 1.20× ± 0.10"
    )


def test_a_pool_mostly_unsold_does_not_pay_however_well_it_packs() -> None:
    one = report()  # the default asks for half the capacity sold; 0.19 GE per card is
    assert one.verdict == UNSOLD
    assert one.verdict_line == (
        "does not pay yet: 0.19 GE sold per card (81 % unsold), at least 0.50 needed; "
        "1.4 shares per card in use, slowdown 1.20× ± 0.10"
    )
    assert "pays:" not in one.verdict_line


def test_no_verdict_says_sharing_pays_beside_a_pool_under_the_sold_threshold() -> None:
    for needed in (0.1, 0.19, 0.2, 0.5, 0.9):
        one = report(min_ge_sold_per_gpu=needed)
        assert one.ge_sold_per_gpu is not None
        assert (one.verdict == PAYS) == (one.ge_sold_per_gpu >= needed)


def test_too_few_compared_runs_is_not_enough_data() -> None:
    one = report(min_compared_runs=5)
    assert one.verdict == NO_DATA
    assert one.verdict_line == "not enough data: 2 comparable runs on shared cards (5 needed)"


def test_a_wide_spread_of_shared_runtimes_is_jitter() -> None:
    one = report(max_jitter=0.05)
    assert one.verdict == JITTER
    assert one.verdict_line.startswith("jitter too high: slowdown 1.20× ± 0.10")


def test_a_large_slowdown_is_too_slow() -> None:
    one = report(max_slowdown=1.1)
    assert one.verdict == SLOW
    assert one.verdict_line.startswith("too slow: slowdown 1.20× ± 0.10")


def test_cards_that_held_one_share_at_a_time_are_no_gain() -> None:
    one = report(min_shares_per_busy_gpu=1.5)
    assert one.verdict == NO_GAIN
    assert one.verdict_line == "no gain: 1.4 shares per card in use, slowdown 1.20× ± 0.10"


def test_alone_runs_that_disagree_give_no_baseline() -> None:
    runs = [*RUNS[:1], run(2, 2 * H, 4 * H, 0), *RUNS[2:]]  # alone: 1 h and 2 h
    one = report(runs)
    assert one.compared_runs == 0
    assert one.slowdown is None
    assert one.verdict == NO_DATA


def test_failed_runs_and_other_work_are_not_compared() -> None:
    runs = [*RUNS[:4], run(5, 6 * H, 6 * H + 4680, 1, succeeded=False)]
    one = report(runs)
    assert one.compared_runs == 1
    assert one.slowdown == 1.1


def test_a_run_before_the_period_is_only_a_neighbour() -> None:
    before = run(9, -3 * H, -H, 0, image="old")
    alone_then_shared = run(8, -2 * H, -H + 1, 0)  # beside `before` all its life
    one = report([before, alone_then_shared, *RUNS])
    assert one.sold_gpu_equivalent_hours == 3.1
    assert one.shared_runs == 3  # the early run ended before the period: not counted


def test_a_whole_card_pool_is_not_shared_and_strands_nothing() -> None:
    pool = Pool(2, "A100", "a100", "exclusive", (card(0), card(1)), (Shape(whole=True),))
    whole = Shape(whole=True)
    runs = [
        run(1, 0, 4 * H, 0, shape=whole, ge=1.0, pool_id=2),
        run(2, 0, 2 * H, 1, shape=whole, ge=1.0, pool_id=2),
    ]
    one = report(runs, pool=pool)
    assert one.ge_sold_per_gpu == pytest.approx(6 / 16, abs=1e-3)
    assert one.ge_sold_per_busy_gpu == 1.0
    assert one.shares_per_busy_gpu == 1.0
    assert one.stranded_gpu_hours == 0.0
    assert one.verdict == NOT_SHARED
    assert one.verdict_line == "whole cards, not shared: 0.38 GE sold per card (62 % unsold)"


def test_an_empty_period_has_no_figures() -> None:
    one = report([], end=0)
    assert one.capacity_gpu_hours == 0.0
    assert one.ge_sold_per_gpu is None
    assert one.activity_percent_per_ge is None
    assert one.verdict == NO_DATA


@pytest.mark.parametrize(
    ("layout", "held", "wanted", "share"),
    [
        # vGPU: 6 GB / 25 % free fits the 6 GB share; not the 12 GB one.
        ({}, [TWELVE, SIX], [SIX, TWELVE], 0.0),
        ({}, [TWELVE, SIX], [TWELVE], 0.25),
        # A free card is idle, not stranded; a full one strands nothing.
        ({}, [], [TWELVE], 0.0),
        ({}, [TWELVE, TWELVE], [SIX], 0.0),
        # MIG, 2 × 3g layout: the seventh slice is stranded as soon as the card holds work.
        ({"3g.40gb": 2}, [Shape(mig_profile="3g.40gb")], [Shape(mig_profile="3g.40gb")], 1 / 7),
        # MIG, 7 × 1g layout, 3 used: 4 free slices that a 3g request cannot use.
        ({"1g.10gb": 7}, [Shape(mig_profile="1g.10gb")] * 3, [Shape(mig_profile="3g.40gb")], 4 / 7),
        ({"1g.10gb": 7}, [Shape(mig_profile="1g.10gb")] * 3, [Shape(mig_profile="1g.10gb")], 0.0),
    ],
)
def test_stranded_share_of_one_card(
    layout: dict[str, int], held: list[Shape], wanted: list[Shape], share: float
) -> None:
    assert stranded_share(card(0, mig_layout=layout), held, wanted) == pytest.approx(share)
