"""Table-driven tests of the score plugins and of the placer's choices."""

from __future__ import annotations

import pytest

from scheduling.engine.filters import NODE_FILTERS
from scheduling.engine.planner import Scheduler
from scheduling.engine.scores import (
    SCORES,
    device_packing,
    fragmentation,
    node_packing,
    pool_affinity,
    tenancy_mix,
    tier,
)
from scheduling.engine.state import Claim, FleetState, Shape
from scheduling.engine.types import Policy, Pool

from .builders import EXCL, MIG, VGPU, alloc, fleet, node, req, state_and_shape, whole_claims


@pytest.mark.parametrize(
    ("pool", "flavor", "expected"),
    [(EXCL, "gpu", 1.0), (VGPU, "gpu", 0.0), (MIG, "gpu", 0.0), (VGPU, "v20", 1.0)],
)
def test_pool_affinity_keeps_shareable_pools_for_shared_flavors(
    pool: Pool, flavor: str, expected: float
) -> None:
    st, shape = state_and_shape(fleet(node("n", pool=pool.name)), req("r", flavor))
    assert pool_affinity(st, 0, shape, (), pool, False) == expected


def test_tier_prefers_cheaper_tiers() -> None:
    st, shape = state_and_shape(fleet(node("n")), req("r"))
    assert tier(st, 0, shape, (), Pool("a", tier=0), False) > tier(
        st, 0, shape, (), Pool("b", tier=2), False
    )


@pytest.mark.parametrize(("scoring", "fuller_wins"), [("binpack", True), ("spread", False)])
def test_node_packing_binpack_prefers_fuller_node_and_spread_the_emptier(
    scoring: str, fuller_wins: bool
) -> None:
    snap = fleet(node("full", whole=(0, 1, 2, 3, 4, 5)), node("empty"))
    st, shape = state_and_shape(snap, req("r"))
    pool = Pool("excl", scoring=scoring)  # type: ignore[arg-type]
    full = node_packing(st, st.node_of["full"], shape, ((6, True, 0, 0, 0),), pool, False)
    empty = node_packing(st, st.node_of["empty"], shape, ((8, True, 0, 0, 0),), pool, False)
    assert (full > empty) is fuller_wins


def test_device_packing_binpack_prefers_tighter_vgpu_device() -> None:
    snap = fleet(node("n", pool="vgpu", gpus=2, free_mem=[30_720, 81_920]))
    st, shape = state_and_shape(snap, req("r", "v20"))
    tight = device_packing(st, 0, shape, ((0, False, 20_480, 25, 0),), VGPU, False)
    loose = device_packing(st, 0, shape, ((1, False, 20_480, 25, 0),), VGPU, False)
    assert tight > loose


def test_fragmentation_penalises_breaking_a_fully_free_card_for_a_vgpu_share() -> None:
    snap = fleet(node("n", pool="vgpu", gpus=2, free_mem=[61_440, 81_920], free_cores=[75, 100]))
    st, shape = state_and_shape(snap, req("r", "v20"))
    used = fragmentation(st, 0, shape, ((0, False, 20_480, 25, 0),), VGPU, False)
    fresh = fragmentation(st, 0, shape, ((1, False, 20_480, 25, 0),), VGPU, False)
    assert used > fresh


def test_fragmentation_penalises_breaking_a_fully_free_node_for_a_small_request() -> None:
    snap = fleet(node("a", whole=(0,)), node("b"))
    st, shape = state_and_shape(snap, req("r"))
    assert fragmentation(st, 0, shape, ((1, True, 0, 0, 0),), EXCL, False) == 1.0
    assert fragmentation(st, 1, shape, ((8, True, 0, 0, 0),), EXCL, False) == 0.0


def test_fragmentation_prefers_mig_start_that_keeps_a_large_block() -> None:
    snap = fleet(node("n", pool="mig", gpus=1, mig_masks=[0b1110000]))
    st, shape = state_and_shape(snap, req("r", "m1"))
    at3 = fragmentation(st, 0, shape, ((0, False, 0, 0, 1 << 3),), MIG, False)
    at0 = fragmentation(st, 0, shape, ((0, False, 0, 0, 1 << 0),), MIG, False)
    assert at3 > at0


def test_tenancy_mix_prefers_nodes_with_the_same_preemptibility() -> None:
    snap = fleet(
        node("pre"),
        node("grd"),
        allocations=[
            alloc("x", whole_claims("pre", [0]), preemptible=True),
            alloc("y", whole_claims("grd", [0])),
        ],
    )
    st, shape = state_and_shape(snap, req("r"))
    pre, grd = st.node_of["pre"], st.node_of["grd"]
    assert tenancy_mix(st, pre, shape, (), EXCL, True) > tenancy_mix(st, grd, shape, (), EXCL, True)
    assert tenancy_mix(st, grd, shape, (), EXCL, False) > tenancy_mix(
        st, pre, shape, (), EXCL, False
    )


def test_placer_sends_unpinned_whole_request_to_exclusive_pool_before_vgpu_pool() -> None:
    snap = fleet(node("v", pool="vgpu"), node("x", pool="excl", model="L4"), pending=[req("r")])
    plan = Scheduler(snap).plan(now=0.0)
    assert plan.admissions[0].node_ids == ("x",)


def test_placer_binpacks_vgpu_shares_onto_a_used_card() -> None:
    snap = fleet(
        node("n", pool="vgpu", gpus=2, free_mem=[40_960, 81_920], free_cores=[50, 100]),
        pending=[req("r", "v20")],
    )
    plan = Scheduler(snap).plan(now=0.0)
    assert plan.admissions[0].devices_by_node == (("n", (0,)),)


def test_placer_spreads_when_pool_says_spread() -> None:
    snap = fleet(
        node("a", whole=(0, 1, 2, 3)),
        node("b"),
        pools=(Pool("excl", scoring="spread"),),
        pending=[req("r")],
    )
    plan = Scheduler(snap).plan(now=0.0)
    assert plan.admissions[0].node_ids == ("b",)


def test_per_pool_score_override_is_used() -> None:
    snap = fleet(node("v", pool="vgpu"), node("x", pool="excl"), pending=[req("r")])
    policy = Policy(scores=(("pool_affinity", 1.0),), pool_scores=(("vgpu", (("tier", 50.0),)),))
    plan = Scheduler(snap, policy).plan(now=0.0)
    assert plan.admissions[0].node_ids == ("v",)


def test_unknown_plugin_names_are_rejected() -> None:
    with pytest.raises(ValueError, match="unknown score"):
        Scheduler(fleet(node("n")), Policy(scores=(("nope", 1.0),)))
    with pytest.raises(ValueError, match="unknown filter"):
        Scheduler(fleet(node("n")), Policy(filters=("nope",)))


@pytest.mark.parametrize(
    "plugin", ["node_packing", "node_size", "device_packing", "fragmentation", "tenancy_mix"]
)
def test_the_stock_policy_places_by_each_registered_score_plugin(
    plugin: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two identical empty nodes tie (lowest id wins) until a registered plugin prefers the other:
    the stock score list is evaluated through the registry, not beside it."""
    snap = fleet(node("a"), node("b"), pending=[req("r")])
    assert Scheduler(snap).plan(now=0.0).admissions[0].node_ids == ("a",)

    def prefers_b(
        st: FleetState, node: int, shape: Shape, claims: tuple[Claim, ...], pool: Pool, pre: bool
    ) -> float:
        return 1.0 if st.node_ids[node] == "b" else 0.0

    monkeypatch.setitem(SCORES, plugin, prefers_b)
    assert Scheduler(snap).plan(now=0.0).admissions[0].node_ids == ("b",)


def test_the_stock_policy_runs_each_registered_node_filter(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plain node (no labels, taints or pins) still goes through the policy's filter chain."""
    snap = fleet(node("a"), node("b"), pending=[req("r")])

    def refuses_a(st: FleetState, node: int, shape: Shape) -> str | None:
        return "no" if st.node_ids[node] == "a" else None

    monkeypatch.setitem(NODE_FILTERS, "node_labels", refuses_a)
    assert Scheduler(snap).plan(now=0.0).admissions[0].node_ids == ("b",)


def test_the_stock_policy_leaves_the_fewest_free_cards_counted_in_cards() -> None:
    """Best-fit's measure: the 2-card node keeps 1 free card, the half-used 8-card node 3."""
    snap = fleet(node("half", whole=(0, 1, 2, 3)), node("pair", gpus=2), pending=[req("r")])
    assert Scheduler(snap).plan(now=0.0).admissions[0].node_ids == ("pair",)


def test_the_stock_policy_puts_small_work_on_the_small_node_among_equals() -> None:
    """Both spots leave no card free; the 8-card node's last card stays free, so it can empty
    when its seven jobs end."""
    snap = fleet(node("big", whole=tuple(range(7))), node("one", gpus=1), pending=[req("r")])
    assert Scheduler(snap).plan(now=0.0).admissions[0].node_ids == ("one",)


@pytest.mark.parametrize(
    ("pool", "flavor", "full_card"),
    [("vgpu", "v20", {"free_mem": [10_240] + [81_920] * 7, "free_cores": [10] + [100] * 7}),
     ("mig", "m3", {"mig_masks": [0b1111111] + [0] * 7})],
)  # fmt: skip
def test_a_share_that_needs_a_fresh_card_takes_it_on_a_node_already_in_use(
    pool: str, flavor: str, full_card: dict[str, list[int]]
) -> None:
    """No used card holds the share, so a fully free card is broken: on the node whose first
    card is taken, not on the empty node listed before it, which an 8-card job could still take
    whole."""
    snap = fleet(
        node("empty", pool=pool),
        node("in-use", pool=pool, **full_card),  # type: ignore[arg-type]
        pending=[req("r", flavor)],
    )
    (admission,) = Scheduler(snap).plan(now=0.0).admissions
    assert admission.node_ids == ("in-use",)
