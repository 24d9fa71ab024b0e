"""The rolling scheduler: a cycle after `begin_cycle` plans what a fresh Scheduler plans."""

from __future__ import annotations

import random
from collections.abc import Collection

from scheduling.engine.planner import plan
from scheduling.engine.simulate import RollingScheduler, Simulation
from scheduling.engine.state import AllocRecord, victim_order
from scheduling.engine.types import Policy, Quota, Request

from .builders import alloc, fleet, node, req


def test_a_cycle_after_work_ended_plans_what_a_fresh_scheduler_plans() -> None:
    queue = [
        req(f"r{i}", gpu_count=2, submitted_at=float(i), max_runtime_seconds=3_600.0)
        for i in range(4)
    ]
    sched = RollingScheduler(fleet(node("n", gpus=4)), Policy())
    sched.begin_cycle(tuple(queue))
    first = sched.plan(now=0.0)
    assert [a.request_id for a in first.admissions] == ["r0", "r1"]
    sched.finish(sched.st.allocs["r0"])
    rest = queue[2:]
    sched.begin_cycle(tuple(rest))
    again = sched.plan(now=10.0)
    still_running = [alloc(a.request_id, a.placement) for a in first.admissions[1:]]
    fresh = plan(fleet(node("n", gpus=4), allocations=still_running, pending=rest), now=10.0)
    assert [a.request_id for a in again.admissions] == ["r2"]
    assert again.admissions == fresh.admissions
    assert again.waiting == fresh.waiting and again.reservations == fresh.reservations


def test_victim_lists_stay_what_a_rebuild_gives_through_starts_ends_and_evictions() -> None:
    """Preemptible work starts, ends and is evicted by higher priorities on shared nodes; after
    every cycle's `begin_cycle` each node's victims are its preemptible work in victim order,
    and each team and flavor lists the nodes where it has some."""
    rng = random.Random(5)
    quotas = [Quota(team, "gpu", 1.0, 6.0) for team in ("a", "b")]
    sim = Simulation(fleet(node("n1", gpus=4), node("n2", gpus=2), quotas=quotas), Policy())
    for i in range(120):
        sim.arrive(
            req(
                f"r{i:03d}",
                team=rng.choice(["a", "b"]),
                gpu_count=rng.choice([1, 1, 2]),
                is_preemptible=rng.random() < 0.6,
                priority=rng.choice([0, 0, 1, 2]),
                submitted_at=float(i * 30),
                max_runtime_seconds=3_600.0,
            ),
            float(i * 30),
            runtime_seconds=rng.uniform(60.0, 900.0),
        )
    sched = sim.sched
    begin = sched.begin_cycle
    checked = 0

    def begin_and_check(pending: tuple[Request, ...], mix: Collection[Request] = ()) -> None:
        nonlocal checked
        begin(pending, mix)
        st = sched.st
        rebuilt: dict[int, list[AllocRecord]] = {}
        for n, ids in enumerate(st.node_allocs):
            recs = sorted((st.allocs[i] for i in ids if st.allocs[i].preemptible), key=victim_order)
            if recs:
                rebuilt[n] = recs
        assert {n: [r.id for r in v] for n, v in st.node_victims.items()} == {
            n: [r.id for r in v] for n, v in rebuilt.items()
        }
        by_pair: dict[tuple[str, str], set[int]] = {}
        for n, recs in rebuilt.items():
            for r in recs:
                by_pair.setdefault((r.team, r.flavor), set()).add(n)
        assert st.victim_nodes_by_tf == {tf: sorted(ns) for tf, ns in by_pair.items()}
        checked += 1

    sched.begin_cycle = begin_and_check  # type: ignore[method-assign]
    sim.run(origin=0.0, cycle_seconds=10.0)
    assert checked > 100
    assert sim.preempted, "higher priorities evicted preemptible work"
    assert sim.finished > 50
