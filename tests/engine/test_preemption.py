"""Preemption: smallest victim set; borrowed before guaranteed, lower priority first, newest first;
never non-preemptible work, never a team at or below its guarantee."""

from __future__ import annotations

from typing import Any

from scheduling.engine.planner import Scheduler
from scheduling.engine.types import Allocation, Policy, Priority, Quota, Team

from .builders import alloc, fleet, node, req, whole_claims

TEAMS = (Team("a", "c"), Team("b", "c"), Team("v", "c"))


def quotas(v_guaranteed: float = 0.0) -> tuple[Quota, ...]:
    return (
        Quota("a", "gpu", 8, 16),
        Quota("b", "gpu", 8, 16),
        Quota("v", "gpu", v_guaranteed, 16),
    )


def full_node(*allocs_spec: tuple[str, list[int], dict[str, Any]]) -> list[Allocation]:
    return [alloc(rid, whole_claims("n", idx), team="v", **kw) for rid, idx, kw in allocs_spec]


def test_higher_priority_request_preempts_lower_priority_preemptible_work() -> None:
    snap = fleet(
        node("n", gpus=2),
        teams=TEAMS,
        quotas=quotas(),
        allocations=full_node(
            ("low", [0], {"priority": Priority.LOW, "preemptible": True}),
            ("keep", [1], {"priority": Priority.LOW, "preemptible": False}),
        ),
        pending=[req("hi", team="a", priority=Priority.HIGH)],
    )
    plan = Scheduler(snap).plan(now=100.0)
    assert [(p.victim_id, p.for_request) for p in plan.preemptions] == [("low", "hi")]
    assert plan.preemptions[0].reason == "low priority work yields to high"
    assert plan.admissions[0].devices_by_node == (("n", (0,)),)


def test_non_preemptible_work_is_never_preempted() -> None:
    snap = fleet(
        node("n", gpus=1),
        teams=TEAMS,
        quotas=quotas(),
        allocations=full_node(("keep", [0], {"priority": Priority.BATCH})),
        pending=[req("hi", team="a", priority=Priority.CRITICAL)],
    )
    plan = Scheduler(snap, Policy(enable_backfill=False)).plan(now=100.0)
    assert plan.preemptions == () and plan.admissions == ()


def test_victims_from_a_team_within_its_guarantee_are_spared() -> None:
    snap = fleet(
        node("n", gpus=1),
        teams=TEAMS,
        quotas=quotas(v_guaranteed=4),
        allocations=full_node(("low", [0], {"priority": Priority.LOW, "preemptible": True})),
        pending=[req("hi", team="a", priority=Priority.HIGH)],
    )
    assert Scheduler(snap).plan(now=100.0).preemptions == ()


def test_borrowed_work_goes_before_guaranteed_work() -> None:
    snap = fleet(
        node("n", gpus=2),
        teams=TEAMS,
        quotas=quotas(),
        allocations=full_node(
            ("guaranteed", [0], {"priority": Priority.LOW, "preemptible": True}),
            ("borrowed", [1], {"priority": Priority.NORMAL, "preemptible": True, "borrowed": True}),
        ),
        pending=[req("hi", team="a", priority=Priority.HIGH)],
    )
    plan = Scheduler(snap).plan(now=100.0)
    assert [p.victim_id for p in plan.preemptions] == ["borrowed"]


def test_lower_priority_goes_first_then_newest() -> None:
    snap = fleet(
        node("n", gpus=3),
        teams=TEAMS,
        quotas=quotas(),
        allocations=full_node(
            ("normal", [0], {"priority": Priority.NORMAL, "preemptible": True, "started_at": 50.0}),
            ("low-old", [1], {"priority": Priority.LOW, "preemptible": True, "started_at": 10.0}),
            ("low-new", [2], {"priority": Priority.LOW, "preemptible": True, "started_at": 20.0}),
        ),
        pending=[req("hi", team="a", priority=Priority.HIGH)],
    )
    plan = Scheduler(snap).plan(now=100.0)
    assert [p.victim_id for p in plan.preemptions] == ["low-new"]


def test_smallest_victim_set_is_chosen() -> None:
    # Node m: two 1-GPU victims are needed for 2 GPUs; node n: one 2-GPU victim suffices.
    snap = fleet(
        node("m", gpus=2),
        node("n", gpus=2),
        teams=TEAMS,
        quotas=quotas(),
        allocations=[
            alloc("m0", whole_claims("m", [0]), team="v", priority=0, preemptible=True),
            alloc("m1", whole_claims("m", [1]), team="v", priority=0, preemptible=True),
            alloc("n01", whole_claims("n", [0, 1]), team="v", priority=1, preemptible=True),
        ],
        pending=[req("hi", team="a", gpu_count=2, priority=Priority.HIGH)],
    )
    plan = Scheduler(snap).plan(now=100.0)
    assert [p.victim_id for p in plan.preemptions] == ["n01"]


def test_guaranteed_request_reclaims_borrowed_capacity_at_equal_priority() -> None:
    snap = fleet(
        node("n", gpus=1),
        teams=TEAMS,
        quotas=quotas(),
        allocations=full_node(("lent", [0], {"preemptible": True, "borrowed": True})),
        pending=[req("mine", team="a")],
    )
    plan = Scheduler(snap).plan(now=100.0)
    assert [p.victim_id for p in plan.preemptions] == ["lent"]
    assert "reclaims borrowed capacity" in plan.preemptions[0].reason
    assert not plan.admissions[0].borrowed


def test_equal_priority_borrowing_request_does_not_preempt() -> None:
    snap = fleet(
        node("n", gpus=1),
        teams=TEAMS,
        quotas=(Quota("a", "gpu", 0, 4), Quota("b", "gpu", 4, 4), Quota("v", "gpu", 0, 4)),
        allocations=full_node(("lent", [0], {"preemptible": True, "borrowed": True})),
        pending=[req("borrower", team="a")],
    )
    assert Scheduler(snap).plan(now=100.0).preemptions == ()


def test_preemption_disabled_by_policy() -> None:
    snap = fleet(
        node("n", gpus=1),
        teams=TEAMS,
        quotas=quotas(),
        allocations=full_node(("low", [0], {"priority": 0, "preemptible": True})),
        pending=[req("hi", team="a", priority=Priority.HIGH)],
    )
    assert Scheduler(snap, Policy(enable_preemption=False)).plan(now=0.0).preemptions == ()
