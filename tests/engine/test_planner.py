"""End-to-end behaviour of plan() and Scheduler.place_one()."""

from __future__ import annotations

import pytest

from scheduling.engine.planner import Scheduler, plan
from scheduling.engine.types import Policy, Priority, Quota

from .builders import alloc, fleet, node, req, whole_claims


def test_waiting_reason_for_vgpu_names_model_and_size() -> None:
    snap = fleet(
        node("l4", pool="vgpu", model="L4", gpus=1, free_mem=[10_240], free_cores=[100]),
        pending=[req("r", "v20", pinned_model="L4")],
    )
    (w,) = plan(snap, now=0.0, policy=Policy(enable_backfill=False)).waiting
    assert w.reason == "no L4 node has 20 GiB and 25% cores free on one GPU"
    assert w.code == "capacity"


def test_waiting_reason_for_mig_names_profile() -> None:
    snap = fleet(
        node("h", pool="mig", model="H100-80G", gpus=1, mig_masks=[0b1111111]),
        pending=[req("r", "m1")],
    )
    (w,) = plan(snap, now=0.0, policy=Policy(enable_backfill=False)).waiting
    assert w.reason == "no eligible GPU has a free 1g.10gb MIG slice"


def test_waiting_reason_when_no_pool_accepts_the_kind() -> None:
    snap = fleet(node("n"), pending=[req("r", "m1")], pools=())
    (w,) = plan(snap, now=0.0).waiting
    assert w.reason.startswith("no pool can run it")


@pytest.mark.parametrize(
    ("request_kwargs", "reason_part"),
    [
        ({"flavor": "nope"}, "unknown flavor"),
        ({"gpu_count": 0}, "at least 1"),
        ({"flavor": "m1", "mig_profile": "5g.50gb", "gpu_count": 2}, "unknown MIG profile"),
        ({"max_runtime_seconds": 0}, "positive"),
    ],
)
def test_invalid_requests_wait_with_code_invalid(
    request_kwargs: dict[str, object], reason_part: str
) -> None:
    r = req("r", **request_kwargs)  # type: ignore[arg-type]
    (w,) = plan(fleet(node("n"), pending=[r]), now=0.0).waiting
    assert w.code == "invalid" and reason_part in w.reason


def test_identical_shapes_fail_fast_with_the_same_reason() -> None:
    snap = fleet(
        node("n", whole=(0,)),
        pending=[req(f"r{i}", gpu_count=8, submitted_at=float(i)) for i in range(5)],
    )
    p = plan(snap, now=0.0, policy=Policy(enable_backfill=False))
    assert len({w.reason for w in p.waiting}) == 1


def test_place_one_admits_an_arriving_request_against_indexed_state() -> None:
    snap = fleet(node("n", gpus=2), pending=[req("first")])
    sched = Scheduler(snap)
    sched.plan(now=0.0)
    d1 = sched.place_one(req("arrival"), now=1.0)
    d2 = sched.place_one(req("too-many"), now=1.0)
    assert d1.admission is not None and d1.admission.devices_by_node == (("n", (1,)),)
    assert d2.admission is None and d2.code == "capacity"


def test_scheduler_plans_a_single_cycle() -> None:
    sched = Scheduler(fleet(node("n")))
    sched.plan(now=0.0)
    with pytest.raises(RuntimeError):
        sched.plan(now=0.0)


def test_plan_is_independent_of_input_order() -> None:
    reqs = [req(f"r{i}", gpu_count=1 + i % 3, submitted_at=float(i % 4)) for i in range(12)]
    nodes = [node(f"n{i}", gpus=4) for i in range(3)]
    a = plan(fleet(*nodes, pending=reqs), now=0.0)
    b = plan(fleet(*reversed(nodes), pending=list(reversed(reqs))), now=0.0)
    assert a.admissions == b.admissions and a.waiting == b.waiting


def test_best_fit_baseline_places_by_least_leftover() -> None:
    snap = fleet(
        node("v", pool="vgpu", gpus=2, free_mem=[81_920, 30_720], free_cores=[100, 50]),
        pending=[req("r", "v20")],
    )
    p = plan(snap, now=0.0, policy=Policy(placer="best_fit"))
    assert p.admissions[0].devices_by_node == (("v", (1,)),)


def test_plan_restores_the_garbage_collector_state() -> None:
    import gc

    snap = fleet(node("n"), pending=[req("r")])
    assert gc.isenabled()
    plan(snap, now=0.0)
    assert gc.isenabled()
    gc.disable()
    try:
        plan(snap, now=0.0)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_borrower_whose_team_loses_borrowed_work_in_the_first_pass_is_decided_there() -> None:
    """Team a runs 3 cards over a guarantee of 2 (2 of them borrowed), so its queued card
    borrows too. Team b's higher-priority request preempts the borrowed work in the first pass;
    a's request is then within its guarantee and takes the last free card in that pass, before
    c's borrower, which the second pass would have served first (c holds nothing)."""
    quotas = [Quota("a", "gpu", 2.0, 5.0), Quota("b", "gpu", 3.0, 5.0), Quota("c", "gpu", 0.0, 5.0)]
    snap = fleet(
        node("n", gpus=5),
        quotas=quotas,
        allocations=[
            alloc("a-keep", whole_claims("n", [0]), team="a"),
            alloc("a-run", whole_claims("n", [1, 2]), team="a", preemptible=True, borrowed=True),
        ],
        pending=[
            req("b1", team="b", gpu_count=3, priority=Priority.HIGH, submitted_at=3.0),
            req("a1", team="a", submitted_at=2.0),
            req("c1", team="c", submitted_at=1.0),
        ],
    )
    out = plan(snap, now=10.0)
    assert [p.victim_id for p in out.preemptions] == ["a-run"]
    assert sorted(a.request_id for a in out.admissions) == ["a1", "b1"]
    assert [(w.request_id, w.code) for w in out.waiting] == [("c1", "quota")]


def test_quota_blocked_requests_wait_after_those_waiting_for_capacity() -> None:
    """a-big (high priority) is over team a's limit when the cycle starts: it waits with the
    quota reason behind b-big, a borrower waiting for capacity, and its reason names a's usage
    after a-one was admitted in the same cycle."""
    quotas = [Quota("a", "gpu", 2.0, 2.0), Quota("b", "gpu", 0.0, 8.0), Quota("c", "gpu", 2.0, 2.0)]
    snap = fleet(
        node("n", gpus=4),
        node("m", gpus=4),
        quotas=quotas,
        allocations=[
            alloc("a-run", whole_claims("n", [0]), team="a"),
            alloc("c-run", whole_claims("m", [0, 1]), team="c"),
        ],
        pending=[
            req("a-big", team="a", gpu_count=2, priority=Priority.HIGH, submitted_at=0.0),
            req("a-one", team="a", submitted_at=1.0),
            req("b-big", team="b", gpu_count=4, submitted_at=2.0),
        ],
    )
    out = plan(snap, now=10.0, policy=Policy(enable_backfill=False))
    assert [a.request_id for a in out.admissions] == ["a-one"]
    assert [(w.request_id, w.code, w.position) for w in out.waiting] == [
        ("b-big", "capacity", 1),
        ("a-big", "quota", 2),
    ]
    assert out.waiting[1].reason == "team a is at its gpu limit (2.00 of 2.00 GPU-eq used)"
