"""Lending of unassigned capacity: capacity no team is guaranteed is borrowed up to each team's
limit as preemptible work, and a guaranteed request takes it back by preemption.

Properties over generated fleets, teams, quotas and queues (hypothesis), plus table tests of
the capacity a flavor lends.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from scheduling.engine.planner import plan
from scheduling.engine.quota import QuotaLedger, lendable_capacity
from scheduling.engine.types import Allocation, Plan, Policy, Quota, Request, Snapshot, Team

from .builders import EXCL, FLAVORS, MIG, VGPU, fleet, node, req

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NO_BACKFILL = Policy(enable_backfill=False)


@dataclass(frozen=True)
class Situation:
    """A fleet of whole cards, teams with quotas on them and a queue of one-card requests."""

    snapshot: Snapshot
    capacity: int
    guaranteed: dict[str, int]
    limit: dict[str, int]
    lends: bool


@hs.composite
def situations(draw: hs.DrawFn) -> Situation:
    sizes = draw(hs.lists(hs.integers(1, 4), min_size=1, max_size=4))
    capacity = sum(sizes)
    lends = draw(hs.booleans())
    cohort = draw(hs.sampled_from([None, "c"]))
    names = [f"t{i}" for i in range(draw(hs.integers(2, 4)))]
    guaranteed: dict[str, int] = {}
    limit: dict[str, int] = {}
    left = capacity
    for name in names:
        guaranteed[name] = draw(hs.integers(0, left))
        left -= guaranteed[name]
        limit[name] = draw(hs.integers(guaranteed[name], capacity))
    pending: list[Request] = []
    for name in names:
        for i in range(draw(hs.integers(0, capacity))):
            pending.append(req(f"{name}-{i}", team=name, submitted_at=float(len(pending))))
    snap = fleet(
        *(node(f"n{i}", gpus=size) for i, size in enumerate(sizes)),
        pools=(replace(EXCL, lends_unassigned=lends),),
        teams=tuple(Team(name, cohort) for name in names),
        quotas=tuple(Quota(n, "gpu", guaranteed[n], limit[n]) for n in names),
        pending=pending,
        flavors=FLAVORS[:1],
    )
    return Situation(snap, capacity, guaranteed, limit, lends)


def used_after(snap: Snapshot, planned: Plan) -> dict[str, int]:
    victims = {p.victim_id for p in planned.preemptions}
    team_of = {r.id: r.team for r in snap.pending}
    used: defaultdict[str, int] = defaultdict(int)
    for a in snap.allocations:
        if a.request_id not in victims:
            used[a.team] += len(a.placement)
    for adm in planned.admissions:
        used[team_of[adm.request_id]] += len(adm.placement)
    return used


def running(snap: Snapshot, planned: Plan) -> Snapshot:
    """The snapshot after the plan: its admissions run, its queue is empty."""
    team_of = {r.id: r.team for r in snap.pending}
    return fleet(
        *((n, [d for d in snap.devices if d.node_id == n.id]) for n in snap.nodes),
        pools=snap.pools,
        teams=snap.teams,
        quotas=snap.quotas,
        flavors=snap.flavors,
        allocations=[
            Allocation(
                request_id=adm.request_id,
                team=team_of[adm.request_id],
                flavor="gpu",
                gpu_equivalents=float(len(adm.placement)),
                placement=adm.placement,
                started_at=0.0,
                max_runtime_seconds=3600.0,
                preemptible=adm.preemptible,
                borrowed=adm.borrowed,
            )
            for adm in planned.admissions
        ],
    )


@SETTINGS
@given(situations())
def test_lending_stays_within_limits_and_lends_what_nobody_is_guaranteed(s: Situation) -> None:
    planned = plan(s.snapshot, now=0.0, policy=NO_BACKFILL)
    used = used_after(s.snapshot, planned)
    # No team passes its limit.
    assert all(used[t] <= s.limit[t] for t in s.guaranteed)
    grouped = s.snapshot.teams[0].cohort is not None
    over = (
        max(0, sum(used.values()) - sum(s.guaranteed.values()))
        if grouped
        else sum(max(0, used[t] - s.guaranteed[t]) for t in s.guaranteed)
    )
    unassigned = s.capacity - sum(s.guaranteed.values())
    if not s.lends:
        # Lending off: the plan admits what a ledger with nothing unassigned to lend admits,
        # in the same order and as borrowed or not alike.
        strict = QuotaLedger(s.snapshot.teams, s.snapshot.quotas)
        team_of = {r.id: r.team for r in s.snapshot.pending}
        for adm in planned.admissions:
            team = team_of[adm.request_id]
            assert strict.check(team, "", "gpu", 1.0) == (True, adm.borrowed, None)
            strict.charge(team, "", "gpu", 1.0)
        if not grouped:
            assert over == 0
    # Borrowing beyond the (group's) guarantees never exceeds what nobody is guaranteed.
    assert over <= unassigned
    borrowed = {a.request_id for a in planned.admissions if a.borrowed}
    assert all(a.preemptible for a in planned.admissions if a.request_id in borrowed)
    # What waits on quota waits for a reason: its team is at its limit, or nothing is left.
    for wait in planned.waiting:
        team = next(r.team for r in s.snapshot.pending if r.id == wait.request_id)
        if wait.code == "quota":
            assert used[team] + 1 > s.limit[team] or not s.lends or over + 1 > unassigned
        else:
            assert sum(used.values()) == s.capacity  # it waits only for a free card


@SETTINGS
@given(situations(), hs.data())
def test_a_guaranteed_request_always_wins_lent_capacity_back(
    s: Situation, data: hs.DataObject
) -> None:
    first = plan(s.snapshot, now=0.0, policy=NO_BACKFILL)
    after = running(s.snapshot, first)
    used = used_after(s.snapshot, first)
    short = [t for t in s.guaranteed if used[t] < s.guaranteed[t]]
    if not short:
        return
    owner = data.draw(hs.sampled_from(short))
    wanted = data.draw(hs.integers(1, s.guaranteed[owner] - used[owner]))
    asks = [req(f"own{i}", team=owner, submitted_at=100.0 + i) for i in range(wanted)]
    snap = replace(after, pending=tuple(asks))
    second = plan(snap, now=1.0, policy=NO_BACKFILL)
    # Every card of its guarantee is given, none of it borrowed, preempting only borrowed work.
    assert sorted(a.request_id for a in second.admissions) == sorted(r.id for r in asks)
    assert not any(a.borrowed for a in second.admissions)
    lent = {a.request_id for a in after.allocations if a.borrowed}
    assert {p.victim_id for p in second.preemptions} <= lent
    final = used_after(snap, second)
    assert final[owner] == used[owner] + wanted
    assert all(final[t] <= s.limit[t] for t in s.guaranteed)


@SETTINGS
@given(situations())
def test_a_plan_run_as_planned_leaves_the_next_cycle_nothing_to_preempt(s: Situation) -> None:
    """Work within its guarantee is decided before borrowers, so no borrower admitted by a
    cycle holds capacity that a request waiting in that same cycle is guaranteed."""
    first = plan(s.snapshot, now=0.0, policy=NO_BACKFILL)
    left = {w.request_id for w in first.waiting}
    after = replace(
        running(s.snapshot, first), pending=tuple(r for r in s.snapshot.pending if r.id in left)
    )
    second = plan(after, now=10.0, policy=NO_BACKFILL)
    assert second.preemptions == ()
    # Nothing changed between the cycles: what waited still waits, in the same order.
    assert second.admissions == ()
    assert [w.request_id for w in second.waiting] == [w.request_id for w in first.waiting]


def test_borrowers_wait_behind_work_within_its_guarantee() -> None:
    """Team a can only borrow b's idle guarantee (three cards, one of them on a cordoned node).
    b's work is decided first although a's request is older, and the waiting borrower's
    position comes after b's waiting work."""
    snap = fleet(
        node("n", gpus=2),
        node("cordoned", gpus=1, schedulable=False),
        teams=(Team("a", "c"), Team("b", "c")),
        quotas=(Quota("a", "gpu", 0, 2), Quota("b", "gpu", 3, 3)),
        pending=[req("a1", team="a")] + [req(f"b{i}", team="b", submitted_at=i) for i in (1, 2, 3)],
        flavors=FLAVORS[:1],
    )
    planned = plan(snap, now=0.0, policy=NO_BACKFILL)
    assert [a.request_id for a in planned.admissions] == ["b1", "b2"]
    assert [(w.request_id, w.code, w.position) for w in planned.waiting] == [
        ("b3", "capacity", 1),
        ("a1", "capacity", 2),
    ]


def test_the_demo_case_lends_idle_a100s_beyond_the_guarantee() -> None:
    """16 A100s, one team guaranteed 4 with a limit of 8 and using its 4: 4 more are lent."""
    snap = fleet(
        node("a1", gpus=8),
        node("a2", gpus=8),
        teams=(Team("vision", "organisation"),),
        quotas=(Quota("vision", "a100", 4, 8),),
        pending=[
            req("own", "a100", "vision", gpu_count=4),
            req("more", "a100", "vision", gpu_count=4, submitted_at=1.0),
        ],
    )
    planned = plan(snap, now=0.0, policy=NO_BACKFILL)
    assert [(a.request_id, a.borrowed, a.preemptible) for a in planned.admissions] == [
        ("own", False, False),
        ("more", True, True),
    ]


@pytest.mark.parametrize(
    ("lends", "expected"),
    [(True, {"gpu": 10.0, "a100": 10.0, "v10": 8.0, "m1": 0.0}), (False, {"gpu": 0.0})],
)
def test_unassigned_capacity_is_cards_less_guarantees_on_shared_cards(
    lends: bool, expected: dict[str, float]
) -> None:
    """'gpu' (any model) and 'a100' share the 16 A100 cards: both guarantees count for each;
    vGPU cards lend apart; a cordoned MIG node lends nothing."""
    snap = fleet(
        node("a1", gpus=8),
        node("a2", gpus=8),
        node("v1", pool="vgpu", model="L4", gpus=8),
        node("m1", pool="mig", gpus=2, schedulable=False),
        pools=(replace(EXCL, lends_unassigned=lends), VGPU, MIG),
        teams=(Team("a"), Team("b")),
        quotas=(Quota("a", "gpu", 2, 4), Quota("b", "a100", 4, 8), Quota("b", "m1", 0, 1)),
    )
    lending = lendable_capacity(snap)
    for flavor, amount in expected.items():
        assert lending.unassigned[flavor] == pytest.approx(amount)
    assert set(lending.sharing["gpu"]) == {"gpu", "a100"}


def test_flavors_sharing_cards_draw_from_one_unassigned_amount() -> None:
    snap = fleet(
        node("a1", gpus=4),
        teams=(Team("a"), Team("b")),
        quotas=(Quota("a", "gpu", 1, 4), Quota("b", "a100", 1, 4)),
    )
    led = QuotaLedger.of(snap)
    led.charge("a", "", "gpu", 3)  # draws 2 of the 2 unassigned cards
    assert led.unassigned_left("a100") == 0.0
    assert led.check("b", "", "a100", 1) == (True, False, None)  # its guarantee still holds
    led.charge("b", "", "a100", 1)
    ok, _, reason = led.check("b", "", "a100", 1)
    assert not ok and reason is not None and "nothing is left to lend" in reason
