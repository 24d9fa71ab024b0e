"""EASY backfilling around a reservation for the head request, and all-or-nothing gangs."""

from __future__ import annotations

import pytest

from scheduling.engine.planner import Scheduler
from scheduling.engine.state import gang_layout
from scheduling.engine.types import Allocation, Policy, Priority

from .builders import alloc, fleet, node, req, whole_claims


def busy_node() -> list[Allocation]:
    # n: cards 0-5 busy until t=1000, cards 6-7 free; m: 1 card busy until t=5000.
    return [
        alloc("until-1000", whole_claims("n", range(6)), started_at=0.0, max_runtime_seconds=1000),
        alloc("until-5000", whole_claims("m", [0]), started_at=0.0, max_runtime_seconds=5000),
    ]


def test_head_request_gets_reservation_at_earliest_end_of_running_work() -> None:
    snap = fleet(
        node("n"),
        node("m", gpus=1),
        allocations=busy_node(),
        pending=[req("head", gpu_count=8, priority=Priority.HIGH)],
    )
    plan = Scheduler(snap).plan(now=100.0)
    (res,) = plan.reservations
    assert res.request_id == "head" and res.start_at == 1000.0
    assert {c.node_id for c in res.placement} == {"n"}
    (w,) = plan.waiting
    assert w.code == "reserved" and "reserved on n" in w.reason


def test_short_request_backfills_onto_reserved_cards_if_it_ends_before_the_reservation() -> None:
    snap = fleet(
        node("n"),
        allocations=busy_node()[:1],
        pending=[
            req("head", gpu_count=8, priority=Priority.HIGH),
            req("short", gpu_count=2, max_runtime_seconds=500),
        ],
    )
    plan = Scheduler(snap).plan(now=100.0)
    assert [a.request_id for a in plan.admissions] == ["short"]


def test_long_request_waits_behind_reservation_instead_of_delaying_the_head() -> None:
    snap = fleet(
        node("n"),
        allocations=busy_node()[:1],
        pending=[
            req("812", gpu_count=8, priority=Priority.HIGH),
            req("long", gpu_count=2, max_runtime_seconds=5000),
        ],
    )
    plan = Scheduler(snap).plan(now=100.0)
    assert plan.admissions == ()
    waiting = {w.request_id: w for w in plan.waiting}
    assert waiting["long"].code == "reservation"
    assert waiting["long"].reason.startswith(
        "waiting behind reservation for request 812 (starts by 00:16 UTC)"
    )


def test_long_request_runs_now_if_it_does_not_touch_the_reservation() -> None:
    snap = fleet(
        node("n"),
        node("other", gpus=2),
        allocations=busy_node()[:1],
        pending=[
            req("head", gpu_count=8, priority=Priority.HIGH),
            req("long", gpu_count=2, max_runtime_seconds=5000),
        ],
    )
    plan = Scheduler(snap).plan(now=100.0)
    assert [(a.request_id, a.node_ids) for a in plan.admissions] == [("long", ("other",))]


def test_backfill_disabled_means_no_reservation() -> None:
    snap = fleet(node("n"), allocations=busy_node()[:1], pending=[req("head", gpu_count=8)])
    plan = Scheduler(snap, Policy(enable_backfill=False)).plan(now=100.0)
    assert plan.reservations == () and plan.waiting[0].code == "capacity"


def test_gang_spanning_nodes_is_placed_all_or_nothing() -> None:
    snap = fleet(
        node("n1"),
        node("n2"),
        node("n3", whole=(0,)),
        pending=[req("g", gpu_count=16, distributed=True)],
    )
    plan = Scheduler(snap).plan(now=0.0)
    (adm,) = plan.admissions
    assert adm.devices_by_node == (("n1", tuple(range(8))), ("n2", tuple(range(8))))


def test_gang_without_enough_full_nodes_admits_nothing() -> None:
    snap = fleet(
        node("n1"),
        node("n2", whole=(0,)),
        pending=[req("g", gpu_count=16, distributed=True)],
    )
    plan = Scheduler(snap, Policy(enable_backfill=False)).plan(now=0.0)
    assert plan.admissions == ()
    assert plan.waiting[0].reason == "no 2 eligible nodes with 8 free GPUs each for a 16-GPU gang"


def test_gang_takes_the_same_count_of_cards_on_each_node() -> None:
    # 12 cards on 8-card nodes: 2 nodes x 6 (one pod template per gang), not 8 + 4. n2 has
    # only 4 free, so the gang takes n1 and n3, the tighter fits first.
    snap = fleet(
        node("n1"),
        node("n2", whole=(0, 1, 2, 3)),
        node("n3", whole=(0, 1)),
        pending=[req("g", gpu_count=12, distributed=True)],
    )
    (adm,) = Scheduler(snap).plan(now=0.0).admissions
    assert sorted((n, len(d)) for n, d in adm.devices_by_node) == [("n1", 6), ("n3", 6)]


def test_gang_that_cannot_split_evenly_waits_with_a_reason() -> None:
    snap = fleet(
        *(node(f"n{i}", gpus=4) for i in range(3)),
        pending=[req("g", gpu_count=7, distributed=True)],
    )
    plan = Scheduler(snap, Policy(enable_backfill=False)).plan(now=0.0)
    assert plan.admissions == ()
    assert plan.waiting[0].reason == (
        "a 7-GPU gang does not split evenly over 2 eligible nodes of 4 GPUs;"
        " ask for a multiple of 2"
    )


@pytest.mark.parametrize(
    ("gpu_count", "max_devices", "layout"),
    [
        (16, 8, (2, 8)),
        (12, 8, (2, 6)),
        (9, 4, (3, 3)),
        (12, 4, (3, 4)),
        (7, 4, None),
        (3, 8, (1, 3)),
    ],
)
def test_gang_layout(gpu_count: int, max_devices: int, layout: tuple[int, int] | None) -> None:
    assert gang_layout(gpu_count, max_devices) == layout


def test_gang_never_mixes_pools() -> None:
    snap = fleet(
        node("x1"), node("v1", pool="vgpu"), pending=[req("g", gpu_count=16, distributed=True)]
    )
    plan = Scheduler(snap, Policy(enable_backfill=False)).plan(now=0.0)
    assert plan.admissions == ()


def test_exclusive_request_takes_an_empty_node_and_keeps_others_off_it() -> None:
    snap = fleet(
        node("used", whole=(0,)),
        node("empty"),
        pending=[
            req("solo", gpu_count=2, allow_shared_node=False, submitted_at=0.0),
            req("later", gpu_count=7, submitted_at=1.0),
        ],
    )
    plan = Scheduler(snap).plan(now=0.0)
    got = {a.request_id: a.node_ids for a in plan.admissions}
    assert got == {"solo": ("empty",), "later": ("used",)}
