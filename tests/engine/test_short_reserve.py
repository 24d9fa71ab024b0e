"""Short-request reserve (lifecycle isolation): long work leaves a pool's reserved share free."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from scheduling.engine.planner import Scheduler, plan
from scheduling.engine.reserve import format_duration, is_long, leaves_reserve
from scheduling.engine.types import Pool, Priority, Quota, Request, Snapshot

from .builders import alloc, fleet, node, req, whole_claims

HOUR = 3600.0
LONG = 8 * HOUR
SHORT = 1 * HOUR


def reserved(fraction: float = 0.25, threshold: float = 2 * HOUR, name: str = "excl") -> Pool:
    return Pool(
        name, sharing="exclusive", short_reserve_fraction=fraction,
        short_max_runtime_seconds=threshold,
    )  # fmt: skip


def one_node_pool(pool: Pool, used: int = 0, pending: tuple[Request, ...] = ()) -> Snapshot:
    allocations = [alloc("run", whole_claims("n1", range(used)))] if used else []
    return fleet(node("n1"), pools=(pool,), allocations=allocations, pending=pending)


@pytest.mark.parametrize(
    ("fraction", "used", "gpus", "runtime", "admitted"),
    [
        # 8 GPUs, 25 % reserve = 2 GPUs that long work may not take.
        (0.25, 0, 6, LONG, True),
        (0.25, 0, 7, LONG, False),
        (0.25, 0, 7, SHORT, True),
        (0.25, 0, 8, SHORT, True),
        (0.25, 6, 1, LONG, False),
        (0.25, 6, 2, SHORT, True),
        (0.25, 5, 1, LONG, True),
        (0.25, 0, 7, 2 * HOUR, True),  # exactly at the threshold counts as short
        (0.0, 0, 8, LONG, True),  # no reserve
        (1.0, 0, 1, LONG, False),  # the whole pool is for short work
        (1.0, 0, 8, SHORT, True),
    ],
)
def test_long_requests_leave_the_reserved_share_free(
    fraction: float, used: int, gpus: int, runtime: float, admitted: bool
) -> None:
    r = req("r", gpu_count=gpus, max_runtime_seconds=runtime)
    snap = one_node_pool(reserved(fraction), used, (r,))
    result = plan(snap, now=0.0)
    assert bool(result.admissions) is admitted


def test_reserve_reason_names_the_pool_share_and_threshold() -> None:
    r = req("r", gpu_count=7, max_runtime_seconds=LONG)
    result = plan(one_node_pool(reserved(0.2), 0, (r,)), now=0.0)
    (w,) = result.waiting
    assert w.code == "capacity"  # and no reservation: it would hold the reserve itself
    assert not result.reservations
    assert "pool excl keeps 20% for requests up to 2 h" in w.reason


def test_generic_capacity_reason_when_the_reserve_is_not_what_blocks() -> None:
    r = req("r", gpu_count=8, max_runtime_seconds=LONG)
    result = plan(one_node_pool(reserved(0.25), 4, (r,)), now=0.0)
    (w,) = result.waiting
    assert "keeps" not in w.reason
    assert "on one node" in w.reason


def test_long_request_goes_to_a_pool_without_reserve() -> None:
    pools = (reserved(0.5, name="excl"), Pool("other", tier=1, sharing="exclusive"))
    r = req("r", gpu_count=6, max_runtime_seconds=LONG)
    snap = fleet(node("n1"), node("n2", pool="other"), pools=pools, pending=(r,))
    (adm,) = plan(snap, now=0.0).admissions
    assert adm.node_ids == ("n2",)


def test_long_requests_fill_up_to_the_reserve_and_short_ones_take_the_rest() -> None:
    pending = (
        req("l1", gpu_count=4, max_runtime_seconds=LONG, submitted_at=1.0),
        req("l2", gpu_count=2, max_runtime_seconds=LONG, submitted_at=2.0),
        req("l3", gpu_count=1, max_runtime_seconds=LONG, submitted_at=3.0),
        req("s1", gpu_count=1, max_runtime_seconds=SHORT, submitted_at=4.0),
        req("s2", gpu_count=1, max_runtime_seconds=SHORT, submitted_at=5.0),
    )
    result = plan(one_node_pool(reserved(0.25), 0, pending), now=0.0)
    assert {a.request_id for a in result.admissions} == {"l1", "l2", "s1", "s2"}
    assert [w.request_id for w in result.waiting] == ["l3"]


def test_a_refused_long_shape_does_not_refuse_a_short_request_of_the_same_shape() -> None:
    pending = (
        req("l", gpu_count=1, max_runtime_seconds=LONG, submitted_at=1.0),
        req("s", gpu_count=1, max_runtime_seconds=SHORT, submitted_at=2.0),
    )
    result = plan(one_node_pool(reserved(0.25), 6, pending), now=0.0)
    assert [a.request_id for a in result.admissions] == ["s"]


def test_thresholds_are_per_pool() -> None:
    pools = (
        reserved(0.5, threshold=HOUR, name="a"),
        reserved(0.5, threshold=4 * HOUR, name="b"),
    )
    r = req("r", gpu_count=6, max_runtime_seconds=2 * HOUR)  # long for a, short for b
    snap = fleet(node("na", pool="a"), node("nb", pool="b"), pools=pools, pending=(r,))
    (adm,) = plan(snap, now=0.0).admissions
    assert adm.node_ids == ("nb",)


def test_cordoned_nodes_do_not_count_as_reserve_capacity() -> None:
    # 2 nodes x 8, one cordoned: capacity 8, reserve 25 % = 2 GPUs; 7 would leave 1.
    r = req("r", gpu_count=7, max_runtime_seconds=LONG)
    snap = fleet(node("n1"), node("n2", schedulable=False), pools=(reserved(0.25),), pending=(r,))
    assert not plan(snap, now=0.0).admissions


def test_place_one_applies_the_reserve() -> None:
    sched = Scheduler(one_node_pool(reserved(0.25), 6))
    decision = sched.place_one(req("r", max_runtime_seconds=LONG), 0.0)
    assert decision.admission is None
    assert decision.reason is not None and "keeps 25%" in decision.reason
    assert sched.place_one(req("s", max_runtime_seconds=SHORT), 0.0).admission is not None


def test_long_work_does_not_preempt_its_way_into_the_reserve() -> None:
    # 6 GPUs run (one of them preemptible batch); the 2 free ones are the reserve.
    allocations = [
        alloc("keep", whole_claims("n1", range(5))),
        alloc("low", whole_claims("n1", [5]), team="v", priority=Priority.BATCH, preemptible=True),
    ]
    r = req("hi", gpu_count=2, max_runtime_seconds=LONG, priority=Priority.HIGH)
    quotas = (Quota("a", "gpu", 8, 16), Quota("v", "gpu", 0, 16))
    snap = fleet(
        node("n1"), pools=(reserved(0.25),), allocations=allocations, pending=(r,), quotas=quotas
    )
    result = plan(snap, now=0.0)
    assert not result.admissions and not result.preemptions


def test_long_work_preempts_in_a_pool_without_reserve_rather_than_eat_one() -> None:
    # excl keeps 2 of its 8 GPUs (free now; batch work on n1 too, so n1 looks like the
    # cheapest "preemption" with no victim at all); other is full, 2 GPUs held by batch work.
    pools = (reserved(0.25), Pool("other", tier=1, sharing="exclusive"))
    allocations = [
        alloc("keep", whole_claims("n1", range(5))),
        alloc("low1", whole_claims("n1", [5]), team="v", priority=Priority.BATCH, preemptible=True),
        alloc("keep2", whole_claims("n2", range(6))),
        alloc(
            "low", whole_claims("n2", [6, 7]), team="v", priority=Priority.BATCH, preemptible=True
        ),
    ]
    r = req("hi", gpu_count=2, max_runtime_seconds=LONG, priority=Priority.HIGH)
    quotas = (Quota("a", "gpu", 16, 16), Quota("v", "gpu", 0, 16))
    snap = fleet(
        node("n1"), node("n2", pool="other"), pools=pools, allocations=allocations,
        pending=(r,), quotas=quotas,
    )  # fmt: skip
    result = plan(snap, now=0.0)
    assert [p.victim_id for p in result.preemptions] == ["low"]
    (adm,) = result.admissions
    assert adm.node_ids == ("n2",)


def test_long_work_may_preempt_when_the_victims_free_what_it_takes() -> None:
    # The pool is full: short work holds the reserve, preemptible long batch work 2 GPUs.
    allocations = [
        alloc("keep", whole_claims("n1", range(4))),
        alloc("short", whole_claims("n1", [4, 5]), max_runtime_seconds=SHORT),
        alloc(
            "low", whole_claims("n1", [6, 7]), team="v", priority=Priority.BATCH, preemptible=True
        ),
    ]
    r = req("hi", gpu_count=2, max_runtime_seconds=LONG, priority=Priority.HIGH)
    quotas = (Quota("a", "gpu", 8, 16), Quota("v", "gpu", 0, 16))
    snap = fleet(
        node("n1"), pools=(reserved(0.25),), allocations=allocations, pending=(r,), quotas=quotas
    )
    result = plan(snap, now=0.0)
    assert [p.victim_id for p in result.preemptions] == ["low"]
    assert [a.request_id for a in result.admissions] == ["hi"]


def test_reserve_is_deterministic_under_shuffled_input() -> None:
    pending = tuple(
        req(f"r{i}", gpu_count=1 + i % 3, max_runtime_seconds=LONG if i % 2 else SHORT,
            submitted_at=float(i))
        for i in range(12)
    )  # fmt: skip
    snap = fleet(node("n1"), node("n2"), pools=(reserved(0.3),), pending=pending)
    shuffled = replace(snap, pending=tuple(reversed(pending)), nodes=tuple(reversed(snap.nodes)))
    assert plan(snap, now=0.0) == plan(shuffled, now=0.0)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(90, "90 s"), (1800, "30 min"), (5400, "90 min"), (3600, "1 h"), (7200, "2 h"),
     (9000, "2.5 h"), (86400, "24 h"), (3 * 86400, "3 d")],
)  # fmt: skip
def test_format_duration_reads_naturally(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_reserve_helpers() -> None:
    pool = reserved(0.25)
    assert is_long(pool, LONG) and not is_long(pool, SHORT)
    assert not is_long(reserved(0.0), LONG)
    assert leaves_reserve(pool, 8.0, 0.0, 6.0) and not leaves_reserve(pool, 8.0, 0.0, 6.5)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    fraction=hs.sampled_from([0.0, 0.125, 0.25, 0.5, 1.0]),
    used=hs.integers(0, 16),
    jobs=hs.lists(
        hs.tuples(hs.integers(1, 8), hs.booleans(), hs.integers(0, 4)), min_size=1, max_size=12
    ),
)
def test_long_admissions_never_leave_less_than_the_reserve_free(
    fraction: float, used: int, jobs: list[tuple[int, bool, int]]
) -> None:
    """Property: after a cycle, either long work took nothing, or the pool still has its
    reserve free counting only long admissions; short work may take the rest."""
    pool = reserved(fraction)
    allocations = [alloc("run", whole_claims("n1", range(min(used, 8))))]
    if used > 8:
        allocations.append(alloc("run2", whole_claims("n2", range(used - 8))))
    pending = tuple(
        req(f"r{i}", gpu_count=g, max_runtime_seconds=LONG if is_long else SHORT,
            submitted_at=float(order), priority=Priority.NORMAL)
        for i, (g, is_long, order) in enumerate(jobs)
    )  # fmt: skip
    snap = fleet(node("n1"), node("n2"), pools=(pool,), allocations=allocations, pending=pending)
    result = plan(snap, now=0.0)
    by_id = {r.id: r for r in pending}
    long_taken = sum(
        by_id[a.request_id].gpu_count
        for a in result.admissions
        if by_id[a.request_id].max_runtime_seconds > pool.short_max_runtime_seconds
    )
    capacity = 16
    if long_taken:
        assert capacity - used - long_taken >= fraction * capacity - 1e-9
    # Every waiting long request blocked by the reserve names it and holds no reservation.
    for w in result.waiting:
        if "keeps" in w.reason:
            assert by_id[w.request_id].max_runtime_seconds > pool.short_max_runtime_seconds
            assert all(r.request_id != w.request_id for r in result.reservations)
