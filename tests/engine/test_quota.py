"""Quota admission: guaranteed first, then cohort borrowing up to the limit, never beyond."""

from __future__ import annotations

import pytest

from scheduling.engine.planner import Scheduler
from scheduling.engine.quota import Lending, QuotaLedger
from scheduling.engine.types import Quota, Team

from .builders import fleet, node, req

TEAMS = (Team("a", "c"), Team("b", "c"), Team("solo", None))


def ledger(*quotas: Quota) -> QuotaLedger:
    return QuotaLedger(TEAMS, quotas)


@pytest.mark.parametrize(
    ("used_a", "used_b", "demand", "ok", "borrowed", "reason_part"),
    [
        (0, 0, 2, True, False, None),  # within guaranteed
        (2, 0, 1, True, True, None),  # above guaranteed, b idle: borrow
        (3, 0, 2, False, False, "limit"),  # would pass limit 4
        (2, 2, 1, False, False, "nothing is left to lend"),  # cohort fully used
        (0, 9, 2, True, False, None),  # guarantee honoured even if cohort over-used
    ],
)
def test_quota_check_guaranteed_then_borrow_then_limit(
    used_a: float,
    used_b: float,
    demand: float,
    ok: bool,
    borrowed: bool,
    reason_part: str | None,
) -> None:
    led = ledger(Quota("a", "gpu", 2, 4), Quota("b", "gpu", 2, 4))
    led.charge("a", "", "gpu", used_a)
    led.charge("b", "", "gpu", used_b)
    got_ok, got_borrowed, reason = led.check("a", "", "gpu", demand)
    assert (got_ok, got_borrowed) == (ok, borrowed)
    if reason_part:
        assert reason is not None and reason_part in reason


def test_quota_without_entry_blocks_with_reason() -> None:
    ok, _, reason = ledger().check("a", "", "gpu", 1)
    assert not ok and reason == "team a has no quota for gpu"


def test_quota_team_without_cohort_borrows_only_unassigned_capacity() -> None:
    led = ledger(Quota("solo", "gpu", 1, 5))
    led.charge("solo", "", "gpu", 1)
    ok, _, reason = led.check("solo", "", "gpu", 1)
    assert not ok and reason is not None and "nothing is left to lend" in reason
    lending = QuotaLedger(TEAMS, (Quota("solo", "gpu", 1, 5),), Lending({"gpu": 2.0}))
    lending.charge("solo", "", "gpu", 1)
    assert lending.check("solo", "", "gpu", 2) == (True, True, None)
    assert not lending.check("solo", "", "gpu", 3)[0]


def test_project_limit_caps_a_project_inside_its_team() -> None:
    led = ledger(Quota("a", "gpu", 10, 10), Quota("a", "gpu", 0, 1, project="p1"))
    assert led.check("a", "p1", "gpu", 1)[0]
    led.charge("a", "p1", "gpu", 1)
    ok, _, reason = led.check("a", "p1", "gpu", 1)
    assert not ok and reason is not None and "project p1" in reason
    assert led.check("a", "p2", "gpu", 1)[0]


def test_plan_marks_borrowed_admissions_preemptible_and_stops_at_limit() -> None:
    snap = fleet(
        node("n"),
        teams=(Team("a", "c"), Team("b", "c")),
        quotas=(Quota("a", "gpu", 1, 2), Quota("b", "gpu", 4, 4)),
        pending=[req(f"r{i}", submitted_at=float(i)) for i in range(4)],
    )
    plan = Scheduler(snap).plan(now=0.0)
    assert [(a.request_id, a.borrowed, a.preemptible) for a in plan.admissions] == [
        ("r0", False, False),
        ("r1", True, True),
    ]
    assert {w.request_id: w.code for w in plan.waiting} == {"r2": "quota", "r3": "quota"}
    assert plan.waiting[0].reason == "team a is at its gpu limit (2.00 of 2.00 GPU-eq used)"


def test_team_at_limit_reason_names_team_and_flavor() -> None:
    snap = fleet(
        node("h", model="H100-80G"),
        teams=(Team("Speech", None),),
        quotas=(Quota("Speech", "gpu", 0, 0),),
        pending=[req("r", team="Speech")],
    )
    plan = Scheduler(snap).plan(now=0.0)
    assert plan.waiting[0].reason.startswith("team Speech is at its gpu limit")
