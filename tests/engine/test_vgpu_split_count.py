"""HAMi's per-card split count: a vGPU card never holds more shares than its registration
allows, whatever memory and cores it has left, so no admitted share waits for HAMi."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as hs

from scheduling.engine.planner import Scheduler
from scheduling.engine.types import DeviceClaim, GpuDevice, Node, Policy, Snapshot

from .builders import alloc, fleet, node, req


def vgpu_node(name: str, gpus: int, limit: int) -> tuple[Node, list[GpuDevice]]:
    n, devs = node(name, pool="vgpu", model="L4", gpus=gpus)
    return n, [replace(d, vgpu_share_limit=limit) for d in devs]


def share(node_id: str, index: int) -> DeviceClaim:
    return DeviceClaim(node_id, index, whole=False, memory_mib=10_240, cores_percent=12)


def shares_per_card(snap: Snapshot, admitted: list[DeviceClaim]) -> Counter[tuple[str, int]]:
    held = [c for a in snap.allocations for c in a.placement if not c.whole]
    return Counter((c.node_id, c.device_index) for c in [*held, *admitted])


def test_a_card_takes_no_more_shares_than_its_split_count() -> None:
    snap = fleet(
        vgpu_node("l4", gpus=2, limit=2),
        pending=[req(f"r{i}", "v10", submitted_at=float(i)) for i in range(6)],
    )
    plan = Scheduler(snap, Policy(enable_backfill=False)).plan(now=0.0)
    assert len(plan.admissions) == 4, "2 cards x 2 shares, though memory would hold 6"
    assert {w.request_id for w in plan.waiting} == {"r4", "r5"}
    assert plan.waiting[0].reason == (
        "no eligible node has 10 GiB and 12% cores free on one GPU;"
        " 2 GPUs have the room but already hold their vGPU share limit"
    )


def test_without_a_split_count_memory_and_cores_decide() -> None:
    snap = fleet(
        vgpu_node("l4", gpus=2, limit=0),
        pending=[req(f"r{i}", "v10", submitted_at=float(i)) for i in range(6)],
    )
    assert len(Scheduler(snap).plan(now=0.0).admissions) == 6


def test_running_shares_count_against_the_split_count() -> None:
    snap = fleet(
        vgpu_node("full", gpus=2, limit=2),
        vgpu_node("other", gpus=2, limit=2),
        allocations=[
            alloc(f"run{i}", [share("full", i % 2)], flavor="v10", team="a") for i in range(3)
        ],
        pending=[req("two", "v10", gpu_count=2)],
    )
    (adm,) = Scheduler(snap).plan(now=0.0).admissions
    assert adm.devices_by_node == (("other", (0, 1)),), "card 0 of 'full' is at its count"


@settings(max_examples=60, deadline=None)
@given(
    limits=hs.lists(hs.integers(min_value=0, max_value=4), min_size=1, max_size=3),
    running=hs.lists(hs.integers(min_value=0, max_value=5), max_size=8),
    asks=hs.lists(hs.integers(min_value=1, max_value=2), min_size=1, max_size=12),
)
def test_a_plan_never_puts_more_shares_on_a_card_than_it_allows(
    limits: list[int], running: list[int], asks: list[int]
) -> None:
    nodes = [vgpu_node(f"n{i}", gpus=2, limit=limit) for i, limit in enumerate(limits)]
    allowed = {(f"n{i}", d): limit for i, limit in enumerate(limits) for d in (0, 1)}
    cards = sorted(allowed)
    held: Counter[tuple[str, int]] = Counter()
    allocations = []
    for i, pick in enumerate(running):  # running shares within each card's count
        card = cards[pick % len(cards)]
        if allowed[card] and held[card] >= allowed[card]:
            continue
        held[card] += 1
        allocations.append(alloc(f"run{i}", [share(*card)], flavor="v10"))
    snap = fleet(
        *nodes,
        allocations=allocations,
        pending=[
            req(f"r{i}", "v10", gpu_count=n, submitted_at=float(i)) for i, n in enumerate(asks)
        ],
    )
    sched = Scheduler(snap)
    plan = sched.plan(now=0.0)
    admitted = [c for a in plan.admissions for c in a.placement]
    per_card = shares_per_card(snap, admitted)
    for card, count in per_card.items():
        assert not allowed[card] or count <= allowed[card], card
    # The cards the waiting reasons count as at their limit are exactly those.
    st = sched.st
    at_limit = {(st.node_ids[st.dev_node[d]], st.dev_index[d]) for d in st.at_share_limit}
    assert at_limit == {c for c, n in per_card.items() if allowed[c] and n >= allowed[c]}
