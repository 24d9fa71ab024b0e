"""Figures about a plan that a do-nothing or half-hearted plan cannot pass.

Computed from the snapshot and the plan alone (not with the engine's helpers), for any plan:
the engine's, the best-fit baseline's, or one built by hand (tests/engine/test_metric_yardsticks.py
checks that an admit-nothing, an admit-half and a quota-blind plan each score worse than the
engine's on at least one figure).

* `admitted_ge`: GE the plan admits.
* `usable_free_ge_left`: free GE after the plan that a request still waiting could use now
  (it fits the node and is within quota): free GE minus stranded GE (bench/packing.py).
* `class_fair_gap`: priority-blind DRF within each priority class and pool, against a reference
  that hands out the pool's **free capacity** (free GE before the cycle plus what the plan's
  preemptions free) by weighted water-filling over the teams' demand, not what the plan admitted.
* `quota_breaches`: (team, flavor) pairs above their limit that grew in the cycle.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Literal

from bench.packing import stranded, total
from scheduling.engine.types import Plan, Request, Snapshot


def usage_after(snap: Snapshot, plan: Plan) -> dict[tuple[str, str], float]:
    """GE held per (team, flavor) after the plan: surviving running work plus admissions."""
    flavors = {f.id: f for f in snap.flavors}
    out: defaultdict[tuple[str, str], float] = defaultdict(float)
    victims = {p.victim_id for p in plan.preemptions}
    for a in snap.allocations:
        if a.request_id not in victims:
            out[(a.team, a.flavor)] += a.gpu_equivalents
    reqs = {r.id: r for r in snap.pending}
    for adm in plan.admissions:
        r = reqs[adm.request_id]
        out[(r.team, r.flavor)] += r.gpu_count * flavors[r.flavor].gpu_equivalent
    return out


def quota_breaches(snap: Snapshot, plan: Plan) -> int:
    """(team, flavor) pairs whose usage after the plan exceeds the limit and grew in the cycle."""
    before: defaultdict[tuple[str, str], float] = defaultdict(float)
    for a in snap.allocations:
        before[(a.team, a.flavor)] += a.gpu_equivalents
    limit = {(q.team, q.flavor): q.limit for q in snap.quotas if q.project is None}
    after = usage_after(snap, plan)
    return sum(
        1
        for key, used in after.items()
        if used > limit.get(key, 0.0) + 1e-6 and used > before[key] + 1e-6
    )


def admitted_ge(snap: Snapshot, plan: Plan) -> float:
    """GE the plan admits."""
    flavors = {f.id: f for f in snap.flavors}
    reqs = {r.id: r for r in snap.pending}
    return sum(
        reqs[a.request_id].gpu_count * flavors[reqs[a.request_id].flavor].gpu_equivalent
        for a in plan.admissions
    )


def water_fill(
    current: dict[str, float], extra: dict[str, float], weight: dict[str, float], budget: float
) -> dict[str, float]:
    """Weighted water-filling: raise totals toward lambda * weight, each by at most `extra`."""
    teams = sorted(current)
    give = min(budget, sum(extra.values()))
    if give <= 0:
        return dict(current)

    def handed(level: float) -> float:
        return sum(min(extra[t], max(0.0, level * weight[t] - current[t])) for t in teams)

    lo, hi = 0.0, 1.0
    while handed(hi) < give and hi < 1e15:
        hi *= 2
    for _ in range(100):
        mid = (lo + hi) / 2
        if handed(mid) < give:
            lo = mid
        else:
            hi = mid
    return {t: current[t] + min(extra[t], max(0.0, hi * weight[t] - current[t])) for t in teams}


def flavor_pools(snap: Snapshot) -> dict[str, str]:
    """Flavor -> the one pool its requests are pinned to ("fleet" for a flavor nobody asks)."""
    pinned = {r.flavor: r.pools[0] for r in snap.pending}
    return {f.id: pinned.get(f.id, "fleet") for f in snap.flavors}


def free_capacity(snap: Snapshot, plan: Plan) -> dict[str, float]:
    """Free GE per pool before the cycle's admissions, with the plan's victims released."""
    figures = stranded(snap, Plan(preemptions=plan.preemptions), {})
    return {pool: f.free_ge for pool, f in figures.items()}


def class_fair_gap(
    snap: Snapshot,
    plan: Plan,
    capacity: float,
    budget: Literal["free", "admitted"] = "free",
) -> tuple[float, str]:
    """Priority-blind fairness within each priority class, in points of fleet capacity.

    For each class, highest first, and each pool: a budget is handed out by weighted
    water-filling (weights = the team's share of the pool's guaranteed quota) over the teams'
    demand of that class in the pool (pending GE, capped per flavor by the limit room left),
    starting from what each team holds in the pool (surviving running work plus what higher
    classes were actually given).  With `budget="free"` the budget is the pool's free capacity
    (free_capacity) less what the reference handed to higher classes, so a plan that admits
    less than the free room allows is off by the difference; with `budget="admitted"` it is the
    GE the plan admitted in that class and pool (the earlier reference, which an admit-nothing
    plan passes).  The gap of a team in a class is |admitted - fair| summed over pools;
    returned: the largest over classes and teams.
    """
    flavors = {f.id: f for f in snap.flavors}
    pool_of = flavor_pools(snap)
    teams = sorted(t.name for t in snap.teams)
    weight_raw: defaultdict[tuple[str, str], float] = defaultdict(float)
    limit: dict[tuple[str, str], float] = {}
    for q in snap.quotas:
        if q.project is None:
            weight_raw[(pool_of.get(q.flavor, "fleet"), q.team)] += q.guaranteed
            limit[(q.team, q.flavor)] = max(q.limit, q.guaranteed)
    pools = sorted(set(pool_of.values()))
    weight: dict[str, dict[str, float]] = {}
    for pool in pools:
        tot = sum(weight_raw[(pool, t)] for t in teams) or 1.0
        weight[pool] = {t: max(weight_raw[(pool, t)] / tot, 1e-12) for t in teams}
    free: defaultdict[str, float] = defaultdict(float)
    if budget == "free":
        for pool, ge in free_capacity(snap, plan).items():
            free[pool] += ge
    victims = {p.victim_id for p in plan.preemptions}
    held: dict[str, dict[str, float]] = {pool: dict.fromkeys(teams, 0.0) for pool in pools}
    used_tf: defaultdict[tuple[str, str], float] = defaultdict(float)
    for a in snap.allocations:
        if a.request_id not in victims:
            held[pool_of.get(a.flavor, "fleet")][a.team] += a.gpu_equivalents
            used_tf[(a.team, a.flavor)] += a.gpu_equivalents
    admitted = {adm.request_id for adm in plan.admissions}
    by_class: defaultdict[int, list[Request]] = defaultdict(list)
    for r in snap.pending:
        by_class[r.priority].append(r)
    worst, detail = 0.0, "no gap"
    for prio in sorted(by_class, reverse=True):
        reqs = by_class[prio]
        demand: defaultdict[tuple[str, str, str], float] = defaultdict(float)
        got: dict[str, dict[str, float]] = {pool: dict.fromkeys(teams, 0.0) for pool in pools}
        for r in reqs:
            ge = r.gpu_count * flavors[r.flavor].gpu_equivalent
            demand[(pool_of[r.flavor], r.team, r.flavor)] += ge
            if r.id in admitted:
                got[pool_of[r.flavor]][r.team] += ge
        gap: defaultdict[str, float] = defaultdict(float)
        for pool in pools:
            give = sum(got[pool].values()) if budget == "admitted" else max(0.0, free[pool])
            extra = dict.fromkeys(teams, 0.0)
            for (p, team, flavor), d in sorted(demand.items()):
                if p == pool:
                    room = max(0.0, limit.get((team, flavor), 0.0) - used_tf[(team, flavor)])
                    extra[team] += min(d, room)
            fair = water_fill(held[pool], extra, weight[pool], give)
            free[pool] -= sum(fair[t] - held[pool][t] for t in teams)
            for t in teams:
                gap[t] += abs(got[pool][t] - (fair[t] - held[pool][t]))
                held[pool][t] += got[pool][t]
        for r in reqs:
            if r.id in admitted:
                used_tf[(r.team, r.flavor)] += r.gpu_count * flavors[r.flavor].gpu_equivalent
        team = max(sorted(gap), key=lambda t: gap[t]) if gap else ""
        if team and gap[team] / capacity * 100 > worst:
            worst = gap[team] / capacity * 100
            detail = f"{team} in priority class {prio}: off by {gap[team]:.1f} GE"
    return worst, detail


@dataclass(frozen=True, slots=True)
class Yardsticks:
    """The figures of one plan (GE, points of fleet capacity, counts)."""

    admitted_ge: float
    free_ge: float
    stranded_ge: float
    usable_free_ge_left: float
    fair_gap_points: float
    quota_breaches: int


def measure(snap: Snapshot, plan: Plan, capacity: float) -> Yardsticks:
    """All figures of `plan` on `snap`; `capacity` is the fleet's GE (for the points)."""
    pools = stranded(snap, plan, usage_after(snap, plan))
    free, strand = total(pools.values(), "free_ge"), total(pools.values(), "stranded_ge")
    return Yardsticks(
        admitted_ge=admitted_ge(snap, plan),
        free_ge=free,
        stranded_ge=strand,
        usable_free_ge_left=free - strand,
        fair_gap_points=class_fair_gap(snap, plan, capacity)[0],
        quota_breaches=quota_breaches(snap, plan),
    )
