"""The MIG table: every profile NVIDIA publishes per card, with placements that fit the card."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduling.engine.blockers import explain_waits
from scheduling.engine.mig import (
    MIG_GPUS,
    builtin_configs,
    layout_fits,
    maximal_layouts,
    profile_problem,
    profile_share,
)
from scheduling.engine.planner import plan
from scheduling.engine.types import MIG_PROFILES
from tests.engine.builders import fleet, node, req

PUBLISHED = {
    "A100-40G": {"1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"},
    "A100-80G": {"1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"},
    "A30": {"1g.6gb", "2g.12gb", "4g.24gb"},
    "H100-80G": {"1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"},
    "H100-94G": {"1g.12gb", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"},
    "H100-96G": {"1g.12gb", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb"},
    "H200-141G": {"1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"},
    "B200-180G": {"1g.23gb", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"},
}


def test_the_table_has_exactly_the_published_profiles_of_each_card() -> None:
    assert {model: set(gpu.profile_names) for model, gpu in MIG_GPUS.items()} == PUBLISHED


@pytest.mark.parametrize("model", sorted(PUBLISHED))
def test_every_placement_lies_within_the_cards_slices(model: str) -> None:
    gpu = MIG_GPUS[model]
    assert (gpu.compute_slices, gpu.memory_slices) == ((4, 4) if model == "A30" else (7, 8))
    for shape in gpu.profiles:
        assert shape.starts, shape
        assert all(s >= 0 and s + shape.memory_slices <= gpu.memory_slices for s in shape.starts)
        # NVIDIA's name says the compute slices: 3g.40gb takes 3 of the card's 7.
        assert shape.compute_slices == int(shape.name.split("g.")[0]), shape
        assert shape.memory_gb * gpu.memory_slices <= gpu.memory_gb * shape.memory_slices + 8
    whole = max(gpu.profiles, key=lambda s: s.compute_slices)
    assert whole.compute_slices == gpu.compute_slices and whole.starts == (0,)


def test_profile_counts_and_combinations_follow_the_user_guide() -> None:
    h100 = MIG_GPUS["H100-80G"]
    assert builtin_configs("H100-80G")["all-1g.10gb"] == {"1g.10gb": 7}
    assert builtin_configs("H100-80G")["all-1g.20gb"] == {"1g.20gb": 4}
    assert builtin_configs("H100-80G")["all-3g.40gb"] == {"3g.40gb": 2}
    assert builtin_configs("A100-40G")["all-1g.10gb"] == {"1g.10gb": 4}
    assert builtin_configs("A30")["all-1g.6gb"] == {"1g.6gb": 4}
    assert builtin_configs("A30")["all-2g.12gb"] == {"2g.12gb": 2}
    assert layout_fits(h100, {"4g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1})
    assert layout_fits(h100, {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2})
    # A 3g instance takes four memory slices: a 1g cannot sit between two of them.
    assert not layout_fits(h100, {"3g.40gb": 2, "1g.10gb": 1})
    assert not layout_fits(h100, {"1g.20gb": 4, "1g.10gb": 1})
    assert not layout_fits(MIG_GPUS["A30"], {"4g.24gb": 1, "1g.6gb": 1})
    assert ((("3g.40gb", 2),)) in maximal_layouts("H100-80G")


def test_no_profile_is_offered_on_a_card_that_lacks_it() -> None:
    assert profile_problem("H100-80G", "3g.40gb") == ""
    assert "offers no MIG profile '1g.5gb'" in profile_problem("H100-80G", "1g.5gb")
    assert "offers no MIG profile '3g.40gb'" in profile_problem("A100-40G", "3g.40gb")
    assert "has no MIG profiles" in profile_problem("L4", "1g.10gb")


def test_engine_profiles_and_shares_come_from_the_table() -> None:
    names = {p for gpu in MIG_GPUS.values() for p in gpu.profile_names}
    assert set(MIG_PROFILES) == names
    assert MIG_PROFILES["1g.20gb"].starts == (0, 2, 4, 6)
    assert profile_share("3g.40gb") == (3, 7)
    assert profile_share("2g.12gb") == (2, 4)
    assert profile_share("9g.99gb") is None


@pytest.mark.parametrize(
    ("problem", "code"),
    [("3 x 3g.40gb do not fit on 1 H100-80G cards.", "mig_layout"), ("", "node_health")],
)
def test_a_request_only_an_unreadable_node_could_serve_waits_on_mig_layout(
    problem: str, code: str
) -> None:
    full, full_cards = node("full", pool="mig", model="H100-80G", gpus=1, mig_masks=[0x7F])
    odd, odd_cards = node("odd", pool="mig", model="H100-80G", gpus=1, schedulable=False)
    snap = fleet(
        (full, full_cards),
        (replace(odd, mig_layout_problem=problem), odd_cards),
        pending=[req("r", "m1")],
    )
    blocker = explain_waits(snap, plan(snap, now=0.0))["r"]
    assert blocker.code == code
    if problem:
        assert blocker.message == (
            "The MIG layout of node odd cannot be read from the cluster, so it is not offered "
            f"for MIG work: {problem}"
        )
