"""Right-sizing is a pure function: table-driven, no database."""

from __future__ import annotations

from decimal import Decimal

import pytest

from accounting.rightsizing import FlavorOption, RunProfile, suggest_smaller_flavor

WHOLE = FlavorOption("A100 whole", 81920, 100, Decimal("1"))
MIG_1G = FlavorOption("H100 1g.10gb", 10240, 14, Decimal("0.1429"))
MIG_3G = FlavorOption("H100 3g.40gb", 40960, 43, Decimal("0.4286"))
VGPU_6G = FlavorOption("L4 6GiB/25%", 6144, 25, Decimal("0.25"))
VGPU_12G = FlavorOption("L4 12GiB/25%", 12288, 25, Decimal("0.5"))
OPTIONS = [WHOLE, MIG_1G, MIG_3G, VGPU_6G, VGPU_12G]


def whole_card_run(
    memory: int | None, activity: float, *, samples: int = 10, gpus: int = 1
) -> RunProfile:
    return RunProfile("A100 whole", gpus, 100, Decimal("1"), memory, activity, samples)


@pytest.mark.parametrize(
    ("run", "expected"),
    [
        # tiny use of a whole card: the smallest MIG slice fits (8 GiB, 10 % → 9.6 GiB, 12 %)
        (whole_card_run(8000, 10), "H100 1g.10gb"),
        # 15 % × 1.2 = 18 % is more than the 1g slice's 14 %: the 6 GiB / 25 % vGPU share
        (whole_card_run(4000, 15), "L4 6GiB/25%"),
        (whole_card_run(4000, 11), "H100 1g.10gb"),
        # memory needs the 3g slice (30 GiB × 1.2 = 36 GiB), compute fits
        (whole_card_run(30000, 30), "H100 3g.40gb"),
        # busy: 40 % activity × 1.2 = 48 % > every share: stays on a whole card
        (whole_card_run(30000, 40), None),
        # big memory: nothing smaller holds 70 GiB
        (whole_card_run(70000, 5), None),
        # too little evidence, no memory figure, or several GPUs: no suggestion
        (whole_card_run(4000, 5, samples=2), None),
        (whole_card_run(None, 5), None),
        (whole_card_run(4000, 5, gpus=2), None),
        # a vGPU share that was used lightly: nothing lighter than 0.25 exists except 1g
        (RunProfile("L4 6GiB/25%", 1, 25, Decimal("0.25"), 3000, 20, 10), "H100 1g.10gb"),
        # headroom is respected at the edge: 10240 / 1.2 = 8533 MiB fits, 8534 does not
        (whole_card_run(8533, 5), "H100 1g.10gb"),
        (whole_card_run(8534, 5), "H100 3g.40gb"),
    ],
)
def test_suggestion(run: RunProfile, expected: str | None) -> None:
    suggestion = suggest_smaller_flavor(run, OPTIONS)
    assert (suggestion.flavor_name if suggestion else None) == expected


def test_suggestion_says_how_much_it_saves_and_why() -> None:
    suggestion = suggest_smaller_flavor(whole_card_run(8000, 10), OPTIONS)
    assert suggestion is not None
    assert suggestion.saving_percent == 85
    assert "8000 MiB" in suggestion.reason and "A100 whole" in suggestion.reason


def test_never_suggests_something_as_heavy_as_what_was_held() -> None:
    run = RunProfile("H100 1g.10gb", 1, 14, Decimal("0.1429"), 1000, 1, 10)
    assert suggest_smaller_flavor(run, OPTIONS) is None


def test_suggests_only_flavors_of_the_same_tier() -> None:
    training = [
        FlavorOption("A100 whole", 81920, 100, Decimal("1"), "training", Decimal("4")),
        FlavorOption("L4 6GiB/25%", 6144, 25, Decimal("0.25"), "interactive", Decimal("0.5")),
        FlavorOption("H100 3g.40gb", 40960, 43, Decimal("0.4286"), "training", Decimal("2")),
    ]
    run = RunProfile("A100 whole", 1, 100, Decimal("1"), 4000, 15, 10, "training", Decimal("4"))
    suggestion = suggest_smaller_flavor(run, training)
    assert suggestion is not None and suggestion.flavor_name == "H100 3g.40gb"


def test_never_suggests_a_lighter_flavor_that_costs_more() -> None:
    options = [
        FlavorOption("H100 1g.10gb", 10240, 14, Decimal("0.1429"), "training", Decimal("5")),
        FlavorOption("H100 3g.40gb", 40960, 43, Decimal("0.4286"), "training", Decimal("3")),
    ]
    run = RunProfile("A100 whole", 1, 100, Decimal("1"), 8000, 10, 10, "training", Decimal("4"))
    suggestion = suggest_smaller_flavor(run, options)
    # 1g fits and is lighter, but pricier than the card held: the 3g slice is the cheaper fit.
    assert suggestion is not None and suggestion.flavor_name == "H100 3g.40gb"
