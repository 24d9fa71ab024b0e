"""The one rule of what a claim uses on a card (`CardUsage`), and that the snapshot, the replay's
starting state and the engine's device lists all count it the same way."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as hs

from scheduling.engine.planner import Scheduler
from scheduling.engine.simulate import starting_snapshot
from scheduling.engine.types import (
    CardUsage,
    DeviceClaim,
    GpuDevice,
    mig_bits,
    stored_claim_usage,
)

from .builders import alloc, fleet, mig_claim, node

CARD_MIB = 81_920


@pytest.mark.parametrize(
    ("claim", "expected"),
    [
        (DeviceClaim("n", 0), CardUsage(whole=True)),
        (
            DeviceClaim("n", 0, whole=False, memory_mib=20_480, cores_percent=25),
            CardUsage(memory_mib=20_480, cores_percent=25),
        ),
        (
            DeviceClaim("n", 0, whole=False, mig_profile="3g.40gb", mig_start=4),
            CardUsage(mig_mask=mig_bits("3g.40gb", 4)),
        ),
        # A MIG profile without a start holds no slices: the claim counts as what else it says.
        (DeviceClaim("n", 0, whole=False, mig_profile="3g.40gb"), CardUsage()),
    ],
)
def test_a_claim_holds_one_kind_of_its_card(claim: DeviceClaim, expected: CardUsage) -> None:
    assert claim.usage == expected


def test_a_stored_claim_counts_as_the_same_claim_in_the_engine() -> None:
    stored = {"node": "n", "device_index": 0, "whole": False, "mig_profile": "1g.10gb"}
    assert (
        stored_claim_usage({**stored, "mig_start": 6})
        == DeviceClaim("n", 0, whole=False, mig_profile="1g.10gb", mig_start=6).usage
        == CardUsage(mig_mask=1 << 6)
    )
    assert stored_claim_usage({"whole": False, "memory_mib": 10_240}) == CardUsage(10_240)


def test_usages_add_up_and_give_back() -> None:
    a = CardUsage(memory_mib=20_480, cores_percent=30)
    b = CardUsage(memory_mib=10_240, cores_percent=20, mig_mask=0b11)
    assert a + b == CardUsage(30_720, 50, 0b11, False)
    assert (a + b) - b == a
    assert (CardUsage(whole=True) - CardUsage(whole=True)).idle


@pytest.mark.parametrize(
    ("held", "extra", "fits"),
    [
        (CardUsage(), CardUsage(whole=True), True),
        (CardUsage(cores_percent=10), CardUsage(whole=True), False),
        (CardUsage(whole=True), CardUsage(), False),
        (CardUsage(memory_mib=61_440, cores_percent=50), CardUsage(20_480, 50), True),
        (CardUsage(memory_mib=61_441, cores_percent=50), CardUsage(20_480, 50), False),
        (CardUsage(memory_mib=10, cores_percent=51), CardUsage(20_480, 50), False),
        (CardUsage(mig_mask=0b0001111), CardUsage(mig_mask=0b1110000), True),
        (CardUsage(mig_mask=0b0001111), CardUsage(mig_mask=0b0011000), False),
    ],
)
def test_what_fits_on_a_card(held: CardUsage, extra: CardUsage, fits: bool) -> None:
    assert held.fits(extra, CARD_MIB) is fits


def test_a_device_holding_a_usage_shows_it_free_clamped_to_the_card() -> None:
    card = GpuDevice("n", 0, memory_total_mib=CARD_MIB, memory_free_mib=CARD_MIB)
    held = card.holding(CardUsage(memory_mib=20_480, cores_percent=40))
    assert (held.memory_free_mib, held.cores_free_percent) == (61_440, 60)
    assert held.usage == CardUsage(memory_mib=20_480, cores_percent=40)
    over = card.holding(CardUsage(memory_mib=2 * CARD_MIB, cores_percent=150))
    assert (over.memory_free_mib, over.cores_free_percent) == (0, 0)
    back = held.holding(held.usage - CardUsage(memory_mib=40_960, cores_percent=80))
    assert (back.memory_free_mib, back.cores_free_percent) == (CARD_MIB, 100)


shares = hs.lists(
    hs.tuples(hs.integers(0, 1), hs.integers(1, 20_000), hs.integers(1, 30)), max_size=3
)


@given(shares)
def test_the_replay_start_and_the_engine_count_the_same_usage(
    held: list[tuple[int, int, int]],
) -> None:
    """Running vGPU shares (within the card) and a MIG instance, counted into the snapshot by
    `starting_snapshot` (the replay) and by the engine's device lists, leave the same free
    memory, cores and slices."""
    base = fleet(node("v", pool="vgpu", gpus=2), node("m", pool="mig", gpus=1))
    running = [
        alloc(
            f"a{i}",
            [DeviceClaim("v", dev, whole=False, memory_mib=mem, cores_percent=cores)],
            flavor="v20",
        )
        for i, (dev, mem, cores) in enumerate(held)
    ]
    running.append(alloc("m0", [mig_claim("m", 0, "3g.40gb", 4)], flavor="m3"))
    snap = starting_snapshot(base, running)
    st = Scheduler(snap).st
    for d in snap.devices:
        on_card = [
            c.usage
            for a in running
            for c in a.placement
            if (c.node_id, c.device_index) == (d.node_id, d.index)
        ]
        used = sum(on_card, CardUsage())
        assert d.usage == used
        i = st.dev_of[(d.node_id, d.index)]
        assert (st.mem_free[i], st.cores_free[i], st.mig_mask[i]) == (
            d.memory_free_mib,
            d.cores_free_percent,
            d.mig_used_mask,
        )
