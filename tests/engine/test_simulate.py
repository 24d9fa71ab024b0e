"""The rolling scheduler: a cycle after `begin_cycle` plans what a fresh Scheduler plans."""

from __future__ import annotations

from scheduling.engine.planner import plan
from scheduling.engine.simulate import RollingScheduler
from scheduling.engine.types import Policy

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
