"""Quota ledger: guaranteed quota, borrowing and hard limits, in GPU-equivalents.

A team borrows from two lenders (Kueue's cohort borrowing plus a root cohort that holds the
quota nobody is guaranteed, as Run:ai's over-quota does):

- its cohort: guarantees that cohort-mates leave idle;
- the fleet: *unassigned* capacity, the GE of schedulable cards a flavor can run on minus
  every guarantee on those cards (`lendable_capacity`). A pool's tier may keep its cards out
  (`Pool.lends_unassigned`).

Admission of `demand` GE of flavor f for team t:

1. If t has no quota for f: blocked.
2. If a project quota exists for (t, project, f) and would be exceeded: blocked.
3. If used(t, f) + demand <= guaranteed(t, f): admit, not borrowed.  A guarantee is honoured
   even when others are borrowing (preemption reclaims the capacity).
4. If used(t, f) + demand > limit(t, f): blocked at the limit.
5. The group of t (its cohort, or t alone without one) takes its idle guarantees first; the
   part of the demand that pushes the group past its summed guarantees is drawn from the
   unassigned capacity of f.  When that draw fits what is left unassigned (less what every
   group already draws on f and on flavors sharing its cards): admit as *borrowed*, which
   makes the work preemptible.  Otherwise blocked: nothing left to lend.

The ledger never admits beyond a limit; it is also charged for work admitted earlier in the same
cycle, so the checks see the cycle's own decisions.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

from .types import Flavor, Pool, Quota, Request, Snapshot, Team

EPS = 1e-9
LimitKey = tuple[str, str, str, float]  # (team, project, flavor, demand in GE)


def limit_key(request: Request, flavor: Flavor) -> LimitKey:
    """What `QuotaLedger.over_limit` reads for `request` of `flavor`."""
    return (
        request.team,
        request.project,
        request.flavor,
        request.gpu_count * flavor.gpu_equivalent,
    )


@dataclass(frozen=True, slots=True)
class Lending:
    """Unassigned capacity per flavor (GE) and which flavors share cards with each flavor."""

    unassigned: Mapping[str, float] = field(default_factory=dict)
    sharing: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


def _pool_offers(pool: Pool, flavor: Flavor) -> bool:
    if flavor.pools:
        return pool.name in flavor.pools
    if flavor.kind == "whole":
        return pool.sharing == "exclusive"
    return pool.sharing == flavor.kind


def lendable_capacity(snapshot: Snapshot) -> Lending:
    """What each flavor may lend beyond the guarantees: one GE per schedulable card of the
    pools that offer it (its `pools`, else the pools of its sharing mode) and of its GPU model,
    less every team guarantee of a flavor that shares one of those pools' cards; at most the
    cards of pools whose tier lends unassigned capacity."""
    pools = {p.name: p for p in snapshot.pools}
    schedulable = {n.id: n for n in snapshot.nodes if n.schedulable}
    cards: defaultdict[tuple[str, str], float] = defaultdict(float)  # (pool, model) -> GE
    for d in snapshot.devices:
        n = schedulable.get(d.node_id)
        if n is not None and n.pool in pools:
            cards[(n.pool, n.gpu_model)] += 1.0
    keys: dict[str, frozenset[tuple[str, str]]] = {}
    for f in snapshot.flavors:
        keys[f.id] = frozenset(
            (pool, model)
            for pool, model in cards
            if _pool_offers(pools[pool], f) and f.gpu_model in (None, model)
        )
    guaranteed: defaultdict[str, float] = defaultdict(float)
    for q in snapshot.quotas:
        if q.project is None:
            guaranteed[q.flavor] += q.guaranteed
    sharing: dict[str, tuple[str, ...]] = {}
    unassigned: dict[str, float] = {}
    for fid, mine in keys.items():
        sharing[fid] = tuple(sorted(g for g, theirs in keys.items() if mine & theirs))
        total = sum(cards[k] for k in mine)
        lends = sum(cards[k] for k in mine if pools[k[0]].lends_unassigned)
        left = total - sum(guaranteed[g] for g in sharing[fid])
        unassigned[fid] = max(0.0, min(lends, left))
    return Lending(unassigned, sharing)


class QuotaLedger:
    """Guaranteed/limit/usage per (team, flavor), per cohort and per project, and what the
    fleet's unassigned capacity still lends."""

    def __init__(
        self, teams: tuple[Team, ...], quotas: tuple[Quota, ...], lending: Lending | None = None
    ) -> None:
        self.cohort_of: dict[str, str | None] = {t.name: t.cohort for t in teams}
        self.guaranteed: dict[tuple[str, str], float] = {}
        self.team_guaranteed: defaultdict[str, float] = defaultdict(float)  # over flavors
        self.limit: dict[tuple[str, str], float] = {}
        self.project_limit: dict[tuple[str, str, str], float] = {}
        self.used: defaultdict[tuple[str, str], float] = defaultdict(float)
        self.project_used: defaultdict[tuple[str, str, str], float] = defaultdict(float)
        self.cohort_guaranteed: defaultdict[tuple[str, str], float] = defaultdict(float)
        self.cohort_used: defaultdict[tuple[str, str], float] = defaultdict(float)
        self.lending = lending or Lending()
        # GE each flavor draws from unassigned capacity now.
        self.drawn: defaultdict[str, float] = defaultdict(float)
        for q in sorted(quotas, key=lambda q: (q.team, q.flavor, q.project or "")):
            if q.project is None:
                self.guaranteed[(q.team, q.flavor)] = q.guaranteed
                self.limit[(q.team, q.flavor)] = max(q.limit, q.guaranteed)
                cohort = self.cohort_of.get(q.team)
                if cohort is not None:
                    self.cohort_guaranteed[(cohort, q.flavor)] += q.guaranteed
            else:
                self.project_limit[(q.team, q.project, q.flavor)] = q.limit
        for (team, _), guaranteed in self.guaranteed.items():
            self.team_guaranteed[team] += guaranteed

    @classmethod
    def of(cls, snapshot: Snapshot) -> QuotaLedger:
        """The ledger of a snapshot's teams and quotas, lending its unassigned capacity."""
        return cls(snapshot.teams, snapshot.quotas, lendable_capacity(snapshot))

    # ------------------------------------------------------------------ borrowing

    def _group_figures(self, team: str, flavor: str) -> tuple[float, float]:
        """(used, guaranteed) of the team's group for `flavor`."""
        cohort = self.cohort_of.get(team)
        if cohort is not None:
            return self.cohort_used[(cohort, flavor)], self.cohort_guaranteed[(cohort, flavor)]
        key = (team, flavor)
        return self.used[key], self.guaranteed.get(key, 0.0)

    def draw_for(self, team: str, flavor: str, demand: float) -> float:
        """GE of unassigned capacity that `demand` more would draw (past the group's idle
        guarantees)."""
        used, guaranteed = self._group_figures(team, flavor)
        return max(0.0, used + demand - guaranteed) - max(0.0, used - guaranteed)

    def cohort_idle(self, team: str, flavor: str) -> float:
        """Guaranteed GE of the team's group (cohort, or the team alone) nobody uses now."""
        used, guaranteed = self._group_figures(team, flavor)
        return max(0.0, guaranteed - used)

    def unassigned_left(self, flavor: str) -> float:
        """Unassigned GE of `flavor` not yet lent (to it or to flavors sharing its cards)."""
        lent = sum(self.drawn[f] for f in self.lending.sharing.get(flavor, (flavor,)))
        return max(0.0, self.lending.unassigned.get(flavor, 0.0) - lent)

    # ------------------------------------------------------------------ admission

    def check(
        self, team: str, project: str, flavor: str, demand: float
    ) -> tuple[bool, bool, str | None]:
        """(admissible, borrowed, reason-if-not) for `demand` more GE of `flavor`."""
        why = self.over_limit(team, project, flavor, demand)
        if why is not None:
            return False, False, why
        if self.within_guarantee(team, flavor, demand):
            return True, False, None
        draw = self.draw_for(team, flavor, demand)
        if draw <= EPS or draw <= self.unassigned_left(flavor) + EPS:
            return True, True, None
        return (
            False,
            False,
            f"team {team} is over its guaranteed {flavor} quota and nothing is left to lend "
            f"({self.cohort_idle(team, flavor):.2f} GPU-eq of idle guarantees, "
            f"{self.unassigned_left(flavor):.2f} unassigned)",
        )

    def over_limit(self, team: str, project: str, flavor: str, demand: float) -> str | None:
        """Why `demand` more GE of `flavor` would pass a limit (rules 1, 2 and 4), else None."""
        key = (team, flavor)
        limit = self.limit.get(key)
        if limit is None:
            return f"team {team} has no quota for {flavor}"
        pkey = (team, project, flavor)
        plimit = self.project_limit.get(pkey)
        if plimit is not None and self.project_used[pkey] + demand > plimit + EPS:
            return f"project {project} of team {team} is at its {flavor} limit"
        used = self.used[key]
        if used + demand > limit + EPS:
            return f"team {team} is at its {flavor} limit ({used:.2f} of {limit:.2f} GPU-eq used)"
        return None

    def within_guarantee(self, team: str, flavor: str, demand: float) -> bool:
        """True when `demand` more GE of `flavor` keeps the team within its guaranteed quota."""
        return self.used[(team, flavor)] + demand <= self.guaranteed.get((team, flavor), 0.0) + EPS

    def charge(self, team: str, project: str, flavor: str, amount: float) -> None:
        """Add (or with a negative amount, give back) usage."""
        draw = self.draw_for(team, flavor, amount)
        self.used[(team, flavor)] += amount
        self.project_used[(team, project, flavor)] += amount
        cohort = self.cohort_of.get(team)
        if cohort is not None:
            self.cohort_used[(cohort, flavor)] += amount
        if draw:
            self.drawn[flavor] += draw

    def above_guarantee(self, team: str, flavor: str) -> bool:
        """True when the team uses more than its guaranteed quota of `flavor` (it is borrowing)."""
        return self.used[(team, flavor)] > self.guaranteed.get((team, flavor), 0.0) + EPS


def quota_unit(kind: str, count: float = 2.0) -> str:
    """The unit a flavor's quota is counted in, named as people read it: whole cards in GPUs,
    vGPU flavors in shares, MIG flavors in instances.  Sums over several flavors are in GPU-eq
    (`GE_UNIT`)."""
    one = abs(count - 1.0) <= EPS
    if kind == "vgpu":
        return "vGPU share" if one else "vGPU shares"
    if kind == "mig":
        return "MIG instance" if one else "MIG instances"
    return "GPU" if one else "GPUs"


GE_UNIT = "GPU-eq"


def units(amount_ge: float, flavor: Flavor) -> float:
    """GPU-equivalents of `flavor` in its own unit (cards, shares or instances)."""
    return amount_ge / flavor.gpu_equivalent if flavor.gpu_equivalent > 0 else amount_ge
