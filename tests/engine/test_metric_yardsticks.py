"""The benchmark's figures (bench/yardsticks.py) tell a do-nothing or half-hearted plan apart.

On a small product-shaped instance (bench.product, fixed seeds, 20 nodes, 400 pending), three
plans that a useless planner could emit are measured against the engine's own plan:

* admit-nothing: every request waits;
* admit-half: every other admission of the engine's plan (its preemptions kept, so the
  remaining admissions still fit);
* quota-blind: the engine's plan on the same snapshot with every quota lifted.

Each must score worse than the engine's plan on at least one figure; admit-nothing must fail
both the fairness figure and the usable-free-GE figure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from bench import product
from bench.yardsticks import Yardsticks, class_fair_gap, measure
from scheduling.engine.planner import plan
from scheduling.engine.types import Plan, Policy, Snapshot, Waiting

SEEDS = (3, 7, 11)
Builder = Callable[[Snapshot, Plan, float], Plan]


def _instance(seed: int) -> tuple[Snapshot, float, float]:
    fleet = product.generate(seed=seed, scale=0.01, pending=400, teams=6)
    return product.snapshot(fleet), fleet.now, fleet.capacity_ge


def _admit_nothing(snap: Snapshot, _engine: Plan, _now: float) -> Plan:
    return Plan(
        waiting=tuple(
            Waiting(r.id, "not planned", "capacity", i + 1) for i, r in enumerate(snap.pending)
        )
    )


def _admit_half(_snap: Snapshot, engine: Plan, _now: float) -> Plan:
    return Plan(admissions=engine.admissions[::2], preemptions=engine.preemptions)


def _quota_blind(snap: Snapshot, _engine: Plan, now: float) -> Plan:
    lifted = tuple(replace(q, guaranteed=1e6, limit=1e6) for q in snap.quotas)
    return plan(replace(snap, quotas=lifted), now=now, policy=Policy())


def _worse(bad: Yardsticks, good: Yardsticks) -> list[str]:
    """The figures on which `bad` scores worse than `good`."""
    eps = 1e-6
    out = []
    if bad.admitted_ge < good.admitted_ge - eps:
        out.append("admitted_ge")
    if bad.usable_free_ge_left > good.usable_free_ge_left + eps:
        out.append("usable_free_ge_left")
    if bad.fair_gap_points > good.fair_gap_points + eps:
        out.append("fair_gap_points")
    if bad.quota_breaches > good.quota_breaches:
        out.append("quota_breaches")
    return out


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(
    ("name", "build", "must_fail"),
    [
        ("admit-nothing", _admit_nothing, {"fair_gap_points", "usable_free_ge_left"}),
        ("admit-half", _admit_half, set()),
        ("quota-blind", _quota_blind, {"quota_breaches"}),
    ],
)
def test_weak_plan_scores_worse_than_engine(
    name: str, build: Builder, must_fail: set[str], seed: int
) -> None:
    snap, now, capacity = _instance(seed)
    engine_plan = plan(snap, now=now, policy=Policy())
    good = measure(snap, engine_plan, capacity)
    assert good.quota_breaches == 0
    bad = measure(snap, build(snap, engine_plan, now), capacity)
    failed = _worse(bad, good)
    assert failed, f"{name} ties the engine on every figure: {bad} vs {good}"
    assert must_fail <= set(failed), f"{name} passes {must_fail - set(failed)}: {bad} vs {good}"


@pytest.mark.parametrize("seed", SEEDS)
def test_admit_nothing_passed_the_admitted_budget_reference(seed: int) -> None:
    """Why the reference hands out free capacity: with only the admitted GE handed out, a plan
    that admits nothing has no gap at all, however much room was free."""
    snap, now, capacity = _instance(seed)
    nothing = _admit_nothing(snap, Plan(), now)
    assert class_fair_gap(snap, nothing, capacity, budget="admitted")[0] == 0.0
    assert class_fair_gap(snap, nothing, capacity, budget="free")[0] > 0.0
    assert measure(snap, nothing, capacity).stranded_ge == 0.0  # it ties on stranded GE
