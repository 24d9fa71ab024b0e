"""Queue order: priority class, then DRF fair share between teams, then age; ids break ties."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as hs

from scheduling.engine.planner import Scheduler
from scheduling.engine.queue import FairQueue, split_by_order
from scheduling.engine.types import Policy, Pool, Priority, QueueKey, Request, Team

from .builders import alloc, fleet, node, req, whole_claims


def drain(q: FairQueue) -> list[str]:
    out = []
    while (r := q.pop()) is not None:
        out.append(r.id)
    return out


def test_queue_serves_higher_priority_first_then_age() -> None:
    reqs = [
        req("old-low", priority=Priority.LOW, submitted_at=1.0),
        req("new-crit", priority=Priority.CRITICAL, submitted_at=9.0),
        req("mid-normal", priority=Priority.NORMAL, submitted_at=5.0),
        req("old-normal", priority=Priority.NORMAL, submitted_at=2.0),
    ]
    q = FairQueue(reqs, ("priority", "fair_share", "age"), lambda team: 0.0)
    assert drain(q) == ["new-crit", "old-normal", "mid-normal", "old-low"]


def test_queue_breaks_age_ties_by_id() -> None:
    reqs = [req("b", submitted_at=1.0), req("a", submitted_at=1.0)]
    assert drain(FairQueue(reqs, ("priority", "age"), lambda t: 0.0)) == ["a", "b"]


def test_queue_without_fair_share_is_plain_priority_then_age() -> None:
    reqs = [req("x", team="t1", submitted_at=2.0), req("y", team="t2", submitted_at=1.0)]
    assert drain(FairQueue(reqs, ("priority", "age"), lambda t: 0.0)) == ["y", "x"]


def test_queue_picks_team_with_lowest_dominant_share_first() -> None:
    shares = {"rich": 0.5, "poor": 0.1}
    reqs = [
        req("rich-1", team="rich", submitted_at=0.0),
        req("poor-1", team="poor", submitted_at=5.0),
    ]
    assert drain(FairQueue(reqs, ("priority", "fair_share", "age"), shares.__getitem__)) == [
        "poor-1",
        "rich-1",
    ]


def test_plan_alternates_between_equal_teams_as_shares_grow() -> None:
    teams = (Team("a", "c", weight=1.0), Team("b", "c", weight=1.0))
    pending = [req(f"a{i}", team="a", submitted_at=float(i)) for i in range(4)] + [
        req(f"b{i}", team="b", submitted_at=10.0 + i) for i in range(4)
    ]
    snap = fleet(node("n"), teams=teams, pending=pending)
    plan = Scheduler(snap).plan(now=0.0)
    assert [a.request_id for a in plan.admissions] == [
        "a0",
        "b0",
        "a1",
        "b1",
        "a2",
        "b2",
        "a3",
        "b3",
    ]


def test_team_holding_more_of_a_scarce_model_waits_behind_others() -> None:
    teams = (Team("a", "c", weight=1.0), Team("b", "c", weight=1.0))
    snap = fleet(
        node("n"),
        teams=teams,
        allocations=[alloc("run", whole_claims("n", [0, 1]), team="a")],
        pending=[
            req("a-new", team="a", submitted_at=0.0),
            req("b-new", team="b", submitted_at=9.0),
        ],
    )
    plan = Scheduler(snap).plan(now=0.0)
    assert [a.request_id for a in plan.admissions] == ["b-new", "a-new"]


def test_waiting_requests_get_queue_positions_in_queue_order() -> None:
    pending: list[Request] = [
        req("big1", gpu_count=8, submitted_at=1.0),
        req("big2", gpu_count=8, submitted_at=2.0),
        req("big3", gpu_count=8, submitted_at=3.0),
    ]
    snap = fleet(node("n", whole=(0,)), pending=pending)
    plan = Scheduler(snap, Policy(enable_backfill=False)).plan(now=0.0)
    assert [(w.request_id, w.position) for w in plan.waiting] == [
        ("big1", 1),
        ("big2", 2),
        ("big3", 3),
    ]


@settings(max_examples=150, deadline=None)
@given(
    hs.lists(
        hs.tuples(hs.integers(0, 3), hs.integers(0, 4), hs.integers(0, 20)),
        max_size=40,
    ),
    hs.lists(hs.integers(0, 3), max_size=60),
)
def test_fair_queue_matches_a_brute_force_drf_reference(
    spec: list[tuple[int, int, int]], admitted_teams: list[int]
) -> None:
    """Heap + fast path == 'pick the team with the lowest (share, oldest age, name)' each step."""
    reqs = [
        req(f"r{i:02d}", team=f"t{t}", priority=p, submitted_at=float(age))
        for i, (t, p, age) in enumerate(spec)
    ]
    usage: dict[str, float] = {}
    gains = iter(admitted_teams)

    def share(team: str) -> float:
        return usage.get(team, 0.0)

    q = FairQueue(reqs, ("priority", "fair_share", "age"), share)
    got = []
    while (r := q.pop()) is not None:
        got.append(r.id)
        if next(gains, 0) % 2:  # some decisions admit and raise the team's share
            usage[r.team] = usage.get(r.team, 0.0) + 1.0

    usage.clear()
    gains = iter(admitted_teams)
    pending = sorted(reqs, key=lambda r: (r.submitted_at, r.id))
    want = []
    while pending:
        top = max(r.priority for r in pending)
        level = [r for r in pending if r.priority == top]
        heads: dict[str, Request] = {}
        for r in level:
            heads.setdefault(r.team, r)
        team = min(heads, key=lambda t: (share(t), heads[t].submitted_at, t))
        r = heads[team]
        pending.remove(r)
        want.append(r.id)
        if next(gains, 0) % 2:
            usage[r.team] = usage.get(r.team, 0.0) + 1.0
    assert got == want


def test_pool_queue_order_override_orders_pool_bound_requests_by_age() -> None:
    pending = [
        req("old-low", "a100", priority=Priority.LOW, submitted_at=1.0),
        req("new-high", "a100", priority=Priority.HIGH, submitted_at=5.0),
    ]
    snap = fleet(node("x", gpus=1), pending=pending, pools=(Pool("excl"),))
    policy = Policy(pool_queue_order=(("excl", ("age",)),), enable_backfill=False)
    plan = Scheduler(snap, policy).plan(now=0.0)
    assert [a.request_id for a in plan.admissions] == ["old-low"]
    default = Scheduler(snap, Policy(enable_backfill=False)).plan(now=0.0)
    assert [a.request_id for a in default.admissions] == ["new-high"]


def test_override_queues_keep_the_order_of_their_first_pool_whichever_requests_wait() -> None:
    # "age" is carried by pools a and z, "priority" by m: the "age" queue runs first (pool a)
    # even when only requests for pool z wait, so the order does not hang on who is waiting.
    overrides: tuple[tuple[str, tuple[QueueKey, ...]], ...] = (
        ("a", ("age",)),
        ("m", ("priority",)),
        ("z", ("age",)),
    )
    only_z, only_m = req("r1", pools=("z",)), req("r2", pools=("m",))
    split = split_by_order(
        [only_m, only_z], ("priority", "fair_share", "age"), overrides, lambda r: list(r.pools)
    )
    assert [(order, [r.id for r in rs]) for order, rs in split] == [
        (("priority", "fair_share", "age"), []),
        (("age",), ["r1"]),
        (("priority",), ["r2"]),
    ]
