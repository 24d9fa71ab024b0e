"""The queue policy over many cycles: held reservations, priority aging, fair share inside a team.

A small cycle loop (`Loop`) plays the portal around the planner: work arrives, each cycle plans
at its tick, admitted work runs until its end, and the reservations a cycle reports are handed
to the next one (`Request.reserved_start_at`), as the live cycle stores them.  Properties:

* a reserved head is never delayed: its reservation's start never moves later from cycle to
  cycle, and it starts by its first reservation's start (at the first tick from then), whatever
  work of any priority arrives and is backfilled meanwhile;
* no request holds a reservation before it waited `reservation_wait_seconds`;
* with priority aging, a low-priority request facing an endless stream of higher-priority work
  starts within (CRITICAL - its priority) aging periods plus twice the longest runtime;
* inside one team, a member facing another member's 500-job sweep gets half of the team's cards
  once the running work has turned over (give or take the card one reservation holds);
* with weighted members who all keep work waiting, the cards are split in proportion to the
  weights, envy-free up to one card: cycle after cycle, no member's weighted share exceeds
  another's by more than one of its own cards.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from scheduling.engine.planner import plan
from scheduling.engine.queue import FairQueue, aged_priority
from scheduling.engine.types import Allocation, Member, Plan, Policy, Priority, Request

from .builders import fleet, node, req

CYCLE = 60.0
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@dataclass
class Loop:
    """Cycles at every CYCLE seconds over whole-card nodes; work runs to its declared max."""

    nodes: list[tuple[int, int]]  # (index, cards)
    policy: Policy
    carry_reservations: bool = True
    members: tuple[Member, ...] = ()  # fair-share weights inside a team (default 1)
    t: float = 0.0
    pending: dict[str, Request] = field(default_factory=dict)
    running: dict[str, Allocation] = field(default_factory=dict)
    started: dict[str, float] = field(default_factory=dict)
    queued: dict[str, float] = field(default_factory=dict)
    plans: list[tuple[float, Plan]] = field(default_factory=list)

    def submit(self, r: Request) -> None:
        self.pending[r.id] = replace(r, submitted_at=self.t, queued_at=self.t)
        self.queued[r.id] = self.t

    def cycle(self) -> Plan:
        for rid, a in list(self.running.items()):
            if a.expected_end <= self.t:
                del self.running[rid]
        snap = fleet(
            *(node(f"n{i}", gpus=g) for i, g in self.nodes),
            allocations=self.running.values(),
            pending=self.pending.values(),
        )
        p = plan(replace(snap, members=self.members), now=self.t, policy=self.policy)
        for adm in p.admissions:
            r = self.pending.pop(adm.request_id)
            self.started[r.id] = self.t
            self.running[r.id] = Allocation(
                request_id=r.id,
                team=r.team,
                flavor=r.flavor,
                gpu_equivalents=float(r.gpu_count),
                placement=adm.placement,
                started_at=self.t,
                max_runtime_seconds=r.max_runtime_seconds,
                priority=r.priority,
                owner=r.owner,
            )
        held = {res.request_id: res.start_at for res in p.reservations}
        if self.carry_reservations:
            for rid, r in self.pending.items():
                self.pending[rid] = replace(r, reserved_start_at=held.get(rid))
        self.plans.append((self.t, p))
        self.t += CYCLE
        return p


# ----------------------------------------------------------------------------- held reservations


@hs.composite
def reservation_worlds(draw: hs.DrawFn) -> tuple[Loop, list[list[Request]]]:
    """A fleet of 1-3 nodes of 4 or 8 cards, running work, and arrivals of every size and
    priority over 40 cycles: heads that wait for a whole node and small work to backfill."""
    sizes = draw(hs.lists(hs.sampled_from([4, 8]), min_size=1, max_size=3))
    wait = draw(hs.sampled_from([0.0, 120.0, 600.0]))
    loop = Loop(list(enumerate(sizes)), Policy(reservation_wait_seconds=wait))
    arrivals: list[list[Request]] = []
    n = 0
    for _ in range(40):
        batch = []
        for _ in range(draw(hs.integers(0, 2))):
            n += 1
            batch.append(
                req(
                    f"r{n}",
                    team=draw(hs.sampled_from(["a", "b", "c"])),
                    gpu_count=draw(hs.sampled_from([1, 1, 2, 3, 4, 8])),
                    priority=draw(hs.integers(Priority.LOW, Priority.HIGH)),
                    max_runtime_seconds=draw(hs.sampled_from([300.0, 900.0, 1800.0, 3600.0])),
                )
            )
        arrivals.append(batch)
    return loop, arrivals


def play(loop: Loop, arrivals: list[list[Request]], tail: int = 80) -> None:
    for batch in arrivals:
        for r in batch:
            loop.submit(r)
        loop.cycle()
    for _ in range(tail):
        if not loop.pending:
            break
        loop.cycle()


def first_reservations(loop: Loop) -> dict[str, tuple[float, float]]:
    """Request id → (tick of its first reservation, that reservation's start)."""
    first: dict[str, tuple[float, float]] = {}
    for t, p in loop.plans:
        for res in p.reservations:
            first.setdefault(res.request_id, (t, res.start_at))
    return first


@SETTINGS
@given(reservation_worlds())
def test_a_reserved_head_is_never_delayed_by_work_admitted_after_it(
    world: tuple[Loop, list[list[Request]]],
) -> None:
    loop, arrivals = world
    play(loop, arrivals)
    first = first_reservations(loop)
    for rid, (_, promised) in first.items():
        # The start it was promised never slides later, cycle after cycle.
        for _, p in loop.plans:
            for res in p.reservations:
                if res.request_id == rid:
                    assert res.start_at <= promised + 1e-6, (rid, res.start_at, promised)
        # And it starts at the first tick from then.
        if promised + CYCLE <= loop.t:
            assert loop.started.get(rid, loop.t) < promised + CYCLE, (rid, promised, loop.started)


@SETTINGS
@given(reservation_worlds())
def test_no_request_holds_a_reservation_before_its_wait_is_over(
    world: tuple[Loop, list[list[Request]]],
) -> None:
    loop, arrivals = world
    play(loop, arrivals, tail=0)
    for t, p in loop.plans:
        for res in p.reservations:
            assert t - loop.queued[res.request_id] >= loop.policy.reservation_wait_seconds


def test_a_kept_reservation_keeps_higher_priority_work_off_its_cards() -> None:
    """Two cycles: the head of a pool holds node n0; a HIGH request arriving next, which the
    queue serves before it, may not take the reserved cards, though they are free."""
    loop = Loop([(0, 4)], Policy())
    loop.submit(req("busy", gpu_count=2, max_runtime_seconds=600.0))
    loop.cycle()
    loop.submit(req("head", gpu_count=4, max_runtime_seconds=600.0))
    p = loop.cycle()
    assert [(r.request_id, r.start_at) for r in p.reservations] == [("head", 600.0)]
    loop.submit(req("urgent", team="b", gpu_count=2, priority=Priority.HIGH))
    p = loop.cycle()
    waiting = {w.request_id: w for w in p.waiting}
    assert waiting["urgent"].code == "reservation"
    assert waiting["urgent"].reason.startswith("waiting behind reservation for request head")
    assert waiting["head"].code == "reserved"
    assert "starts by 00:10 UTC" in waiting["head"].reason
    assert [(r.request_id, r.start_at) for r in p.reservations] == [("head", 600.0)]


def test_before_its_wait_is_over_a_head_is_told_when_it_gets_a_reservation() -> None:
    loop = Loop([(0, 4)], Policy(reservation_wait_seconds=600.0))
    loop.submit(req("busy", gpu_count=2, max_runtime_seconds=3600.0))
    loop.cycle()
    loop.submit(req("head", gpu_count=4))
    p = loop.cycle()
    (w,) = p.waiting
    assert w.code == "capacity"
    assert w.reason.endswith("capacity is reserved for it from 00:11 UTC if it still waits")
    assert p.reservations == ()
    for _ in range(10):
        p = loop.cycle()
    assert [r.request_id for r in p.reservations] == ["head"]


# ----------------------------------------------------------------------------- aging


@hs.composite
def starving_worlds(draw: hs.DrawFn) -> tuple[Loop, Request, int, float]:
    cards = draw(hs.sampled_from([4, 8]))
    aging = draw(hs.sampled_from([300.0, 600.0]))
    low = req(
        "low",
        team="lo",
        gpu_count=draw(hs.integers(1, cards)),
        priority=draw(hs.integers(Priority.BATCH, Priority.NORMAL)),
        max_runtime_seconds=2400.0,  # too long to backfill before any reservation
    )
    per_cycle = draw(hs.integers(2, 3))
    wait = draw(hs.sampled_from([0.0, 300.0]))
    policy = Policy(priority_aging_seconds=aging, reservation_wait_seconds=wait)
    return Loop([(0, cards)], policy), low, per_cycle, aging


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(starving_worlds(), hs.randoms(use_true_random=False))
def test_aging_bounds_the_wait_of_low_priority_work_under_a_stream_of_higher(
    world: tuple[Loop, Request, int, float], rnd: object
) -> None:
    loop, low, per_cycle, aging = world
    longest = 1200.0  # of the higher-priority work
    # Aged to the top class, it waits at most for the reservation held before its own, then
    # for its own: each starts once the work running when it was made has ended.
    bound = (Priority.CRITICAL - low.priority) * aging + 2 * longest + 2 * CYCLE
    bound += loop.policy.reservation_wait_seconds
    horizon = int(bound / CYCLE) + 15
    n = 0
    for k in range(horizon):
        if k == 5:  # once the fleet is busy and work queues up
            loop.submit(low)
        # Bounded arrivals that alone keep the fleet busy: per_cycle x 1 card x >= 600 s.
        for _ in range(per_cycle):
            n += 1
            loop.submit(
                req(
                    f"hi{n}",
                    team="hi",
                    priority=Priority.HIGH if n % 2 else Priority.CRITICAL,
                    max_runtime_seconds=600.0 if n % 3 else longest,
                )
            )
        loop.cycle()
        if "low" in loop.started:
            break
    assert "low" in loop.started, f"waited beyond {bound:.0f}s"
    assert loop.started["low"] - loop.queued["low"] <= bound


def test_aged_priority_rises_one_class_per_period_up_to_critical() -> None:
    r = req("r", priority=Priority.BATCH, queued_at=100.0)
    assert aged_priority(r, 100.0, 600.0) == Priority.BATCH
    assert aged_priority(r, 699.0, 600.0) == Priority.BATCH
    assert aged_priority(r, 700.0, 600.0) == Priority.LOW
    assert aged_priority(r, 100.0 + 10 * 600.0, 600.0) == Priority.CRITICAL
    assert aged_priority(r, 10**9, 0.0) == Priority.BATCH  # no aging


# ----------------------------------------------------------------------------- fair share in team


@hs.composite
def sweep_worlds(draw: hs.DrawFn) -> tuple[Loop, list[Request], list[Request], float]:
    nodes = draw(hs.sampled_from([[(0, 4)], [(0, 8)], [(0, 4), (1, 4)], [(0, 8), (1, 8)]]))
    runtimes = [300.0, 600.0, 900.0]
    sweep = [
        req(f"s{i:03}", owner="sweeper", max_runtime_seconds=draw(hs.sampled_from(runtimes)))
        for i in range(500)
    ]
    other = [
        req(f"o{i:03}", owner="other", max_runtime_seconds=draw(hs.sampled_from(runtimes)))
        for i in range(draw(hs.integers(40, 60)))
    ]
    late = draw(hs.sampled_from([0.0, CYCLE, 5 * CYCLE]))
    return Loop(nodes, Policy()), sweep, other, late


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sweep_worlds())
def test_a_members_share_of_the_team_converges_to_half_against_a_500_job_sweep(
    world: tuple[Loop, list[Request], list[Request], float],
) -> None:
    loop, sweep, other, late = world
    cards = sum(g for _, g in loop.nodes)
    for r in sweep:
        loop.submit(r)
    loop.cycle()
    while loop.t < late:
        loop.cycle()
    for r in other:
        loop.submit(r)
    turned_over = loop.t + 900.0 + CYCLE  # every card held at the other's arrival has ended
    held: list[float] = []
    for _ in range(36):
        loop.cycle()
        t = loop.t - CYCLE
        if t >= turned_over and any(r.owner == "other" for r in loop.pending.values()):
            held.append(sum(a.gpu_equivalents for a in loop.running.values() if a.owner == "other"))
    assert held
    # Half of the cards, give or take the one a reservation may hand the other member first.
    assert min(held) >= cards // 2 - 1, (held, cards)
    assert sum(held) / len(held) >= cards / 2 - 0.5, (held, cards)


def test_team_line_serves_the_member_with_the_lower_share_first() -> None:
    reqs = [req("a1", owner="ann"), req("a2", owner="ann"), req("b1", owner="bob")]
    reqs = [replace(r, submitted_at=float(i)) for i, r in enumerate(reqs)]
    usage = {("a", "ann"): 0.5, ("a", "bob"): 0.25}
    q = FairQueue(reqs, ("priority", "fair_share", "age"), lambda t: 0.0,
                  lambda t, m: usage.get((t, m), 0.0))  # fmt: skip
    first = q.pop()
    assert first is not None and first.id == "b1"
    without = FairQueue(reqs, ("priority", "fair_share", "age"), lambda t: 0.0)
    got = without.pop()
    assert got is not None and got.id == "a1"


@hs.composite
def weighted_team_worlds(draw: hs.DrawFn) -> tuple[Loop, dict[str, int], list[Request]]:
    """One team of 2-4 members with weights 1-5 on 4-16 cards, every member queueing one-card
    jobs of 5-15 cycles, more than the cards can run within the test's horizon."""
    nodes = draw(hs.sampled_from([[(0, 4)], [(0, 8)], [(0, 4), (1, 4)], [(0, 8), (1, 8)]]))
    cards = sum(g for _, g in nodes)
    names = ["ann", "bob", "cyd", "dee"][: draw(hs.integers(2, 4))]
    weights = {m: draw(hs.integers(1, 5), label=f"weight of {m}") for m in names}
    runtimes = [300.0, 600.0, 900.0]
    per_member = cards * (1 + WEIGHTED_CYCLES * int(CYCLE) // 300) + 1  # never runs dry
    # Members queue one after the other, in a drawn order: the first one's jobs are the oldest.
    order = draw(hs.permutations(names))
    queue = [
        req(f"{m}{i:03}", owner=m, max_runtime_seconds=draw(hs.sampled_from(runtimes)))
        for m in order
        for i in range(per_member)
    ]
    # No reservations: a reserved head keeps its cards whoever is furthest below their share
    # by then (the sweep test above bounds that card); this property is about the queue order.
    policy = Policy(max_reservations=0)
    members = tuple(Member("a", m, float(w)) for m, w in weights.items())
    return Loop(nodes, policy, members=members), weights, queue


WEIGHTED_CYCLES = 30


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(weighted_team_worlds())
def test_weighted_members_shares_converge_envy_free_up_to_one_card(
    world: tuple[Loop, dict[str, int], list[Request]],
) -> None:
    loop, weights, queue = world
    cards = sum(g for _, g in loop.nodes)
    for r in queue:
        loop.submit(r)
    for _ in range(WEIGHTED_CYCLES):
        loop.cycle()
        held = dict.fromkeys(weights, 0.0)
        for a in loop.running.values():
            held[a.owner] += a.gpu_equivalents
        waiting = {r.owner for r in loop.pending.values()}
        assert waiting == set(weights)  # every member still has work waiting
        assert sum(held.values()) == cards  # and no card idles
        share = {m: held[m] / cards / w for m, w in weights.items()}
        for m, w in weights.items():
            one_card = 1.0 / cards / w  # one of m's cards, in m's weighted share
            for other in weights:
                assert share[m] - share[other] <= one_card + 1e-9, (loop.t, held, weights)
