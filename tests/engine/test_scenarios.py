"""Scenario tests: plugins working together through plan() and place_one()."""

from __future__ import annotations

from scheduling.engine.planner import Scheduler, plan
from scheduling.engine.types import Policy, Pool, Priority, Quota, Taint, Team

from .builders import alloc, fleet, mig_claim, node, req, whole_claims


def test_whole_card_request_takes_an_empty_mig_card_and_blocks_it_for_slices() -> None:
    snap = fleet(
        node("h", pool="mig", model="H100-80G", gpus=2, mig_masks=[0b0000001, 0]),
        pending=[req("whole", submitted_at=0.0), req("slice", "m7", submitted_at=1.0)],
    )
    p = plan(snap, now=0.0, policy=Policy(enable_backfill=False))
    assert [(a.request_id, a.devices_by_node) for a in p.admissions] == [("whole", (("h", (1,)),))]
    assert p.waiting[0].request_id == "slice"


def test_cordoned_node_is_never_used() -> None:
    snap = fleet(node("off", schedulable=False), pending=[req("r")])
    p = plan(snap, now=0.0, policy=Policy(enable_backfill=False))
    assert p.admissions == () and p.waiting[0].code == "capacity"


def test_tainted_node_only_takes_tolerating_requests() -> None:
    snap = fleet(
        node("t", taints=(Taint("dedicated", "ml"),)),
        pending=[
            req("plain", submitted_at=0.0),
            req("tolerant", tolerations=("dedicated",), submitted_at=1.0),
        ],
    )
    p = plan(snap, now=0.0, policy=Policy(enable_backfill=False))
    assert [a.request_id for a in p.admissions] == ["tolerant"]


def test_workload_kind_not_accepted_anywhere_waits_with_pool_reason() -> None:
    snap = fleet(node("n"), pools=(Pool("excl", allowed_kinds=("inference",)),), pending=[req("r")])
    (w,) = plan(snap, now=0.0).waiting
    assert "does not accept training" in w.reason


def test_exclusive_head_reserves_the_whole_node() -> None:
    snap = fleet(
        node("n", gpus=4),
        allocations=[alloc("busy", whole_claims("n", [0]), max_runtime_seconds=500)],
        pending=[
            req("head", gpu_count=2, allow_shared_node=False, priority=Priority.HIGH),
            req("long", max_runtime_seconds=10_000),
        ],
    )
    p = plan(snap, now=0.0)
    (res,) = p.reservations
    assert res.start_at == 500.0 and len(res.placement) == 4
    assert {w.request_id: w.code for w in p.waiting} == {"head": "reserved", "long": "reservation"}


def test_gang_preempts_full_nodes_all_or_nothing() -> None:
    teams = (Team("a", "c"), Team("v", "c"))
    quotas = (Quota("a", "gpu", 16, 16), Quota("v", "gpu", 0, 16))
    victims = [
        alloc(f"low{i}", whole_claims(f"n{i}", range(8)), team="v", priority=0, preemptible=True)
        for i in range(2)
    ]
    snap = fleet(
        node("n0"),
        node("n1"),
        teams=teams,
        quotas=quotas,
        allocations=victims,
        pending=[req("gang", team="a", gpu_count=16, priority=Priority.HIGH, distributed=True)],
    )
    p = plan(snap, now=0.0)
    assert sorted(x.victim_id for x in p.preemptions) == ["low0", "low1"]
    assert sorted(n for n, _ in p.admissions[0].devices_by_node) == ["n0", "n1"]


def test_place_one_can_preempt_for_an_urgent_arrival() -> None:
    teams = (Team("a", "c"), Team("v", "c"))
    quotas = (Quota("a", "gpu", 4, 4), Quota("v", "gpu", 0, 4))
    snap = fleet(
        node("n", gpus=1),
        teams=teams,
        quotas=quotas,
        allocations=[alloc("low", whole_claims("n", [0]), team="v", priority=0, preemptible=True)],
    )
    sched = Scheduler(snap)
    d = sched.place_one(req("urgent", team="a", priority=Priority.CRITICAL), now=0.0)
    assert d.admission is not None and [x.victim_id for x in d.preemptions] == ["low"]


def test_place_one_respects_the_reservation_made_by_plan() -> None:
    snap = fleet(
        node("n"),
        allocations=[alloc("busy", whole_claims("n", range(6)), max_runtime_seconds=1000)],
        pending=[req("head", gpu_count=8, priority=Priority.HIGH)],
    )
    sched = Scheduler(snap)
    sched.plan(now=0.0)
    long_one = sched.place_one(req("long", max_runtime_seconds=5000), now=0.0)
    short_one = sched.place_one(req("short", max_runtime_seconds=100), now=0.0)
    assert long_one.admission is None and long_one.code == "reservation"
    assert short_one.admission is not None


def test_mig_slice_reuses_a_partly_used_card_before_an_empty_one() -> None:
    snap = fleet(
        node("h", pool="mig", model="H100-80G", gpus=2),
        allocations=[alloc("s", [mig_claim("h", 1, "3g.40gb", 4)], flavor="m3")],
        pending=[req("r", "m1")],
    )
    (adm,) = plan(snap, now=0.0).admissions
    assert adm.devices_by_node == (("h", (1,)),)
    assert adm.placement[0].mig_profile == "1g.10gb" and adm.placement[0].mig_start == 3
