"""Quota ledger: guaranteed quota, cohort borrowing and hard limits, in GPU-equivalents.

Admission of `demand` GE of flavor f for team t (Kueue-style nominal quota + borrowing):

1. If t has no quota for f: blocked.
2. If a project quota exists for (t, project, f) and would be exceeded: blocked.
3. If used(t, f) + demand <= guaranteed(t, f): admit, not borrowed.  A guarantee is honoured
   even when cohort-mates are borrowing (preemption reclaims the capacity).
4. Else if used(t, f) + demand <= limit(t, f) and the cohort of t still has idle guaranteed
   quota for f (cohort used + demand <= cohort guaranteed): admit as *borrowed*, which makes
   the work preemptible.
5. Else blocked: at the limit, or nothing left to borrow.

The ledger never admits beyond a limit; it is also charged for work admitted earlier in the same
cycle, so the checks see the cycle's own decisions.
"""

from __future__ import annotations

from collections import defaultdict

from .types import Quota, Team

EPS = 1e-9


class QuotaLedger:
    """Guaranteed/limit/usage per (team, flavor), per cohort and per project."""

    def __init__(self, teams: tuple[Team, ...], quotas: tuple[Quota, ...]) -> None:
        self.cohort_of: dict[str, str | None] = {t.name: t.cohort for t in teams}
        self.guaranteed: dict[tuple[str, str], float] = {}
        self.limit: dict[tuple[str, str], float] = {}
        self.project_limit: dict[tuple[str, str, str], float] = {}
        self.used: defaultdict[tuple[str, str], float] = defaultdict(float)
        self.project_used: defaultdict[tuple[str, str, str], float] = defaultdict(float)
        self.cohort_guaranteed: defaultdict[tuple[str, str], float] = defaultdict(float)
        self.cohort_used: defaultdict[tuple[str, str], float] = defaultdict(float)
        for q in sorted(quotas, key=lambda q: (q.team, q.flavor, q.project or "")):
            if q.project is None:
                self.guaranteed[(q.team, q.flavor)] = q.guaranteed
                self.limit[(q.team, q.flavor)] = max(q.limit, q.guaranteed)
                cohort = self.cohort_of.get(q.team)
                if cohort is not None:
                    self.cohort_guaranteed[(cohort, q.flavor)] += q.guaranteed
            else:
                self.project_limit[(q.team, q.project, q.flavor)] = q.limit

    def team_guaranteed_total(self, team: str) -> float:
        return sum(v for (t, _), v in self.guaranteed.items() if t == team)

    def check(
        self, team: str, project: str, flavor: str, demand: float
    ) -> tuple[bool, bool, str | None]:
        """(admissible, borrowed, reason-if-not) for `demand` more GE of `flavor`."""
        key = (team, flavor)
        limit = self.limit.get(key)
        if limit is None:
            return False, False, f"team {team} has no quota for flavor {flavor}"
        pkey = (team, project, flavor)
        plimit = self.project_limit.get(pkey)
        if plimit is not None and self.project_used[pkey] + demand > plimit + EPS:
            return False, False, f"project {project} of team {team} is at its {flavor} limit"
        used = self.used[key]
        if used + demand <= self.guaranteed[key] + EPS:
            return True, False, None
        if used + demand > limit + EPS:
            return (
                False,
                False,
                (f"team {team} is at its {flavor} limit ({used:.2f} of {limit:.2f} GPU-eq used)"),
            )
        cohort = self.cohort_of.get(team)
        if cohort is None:
            return (
                False,
                False,
                (
                    f"team {team} is at its guaranteed {flavor} quota "
                    "and has no cohort to borrow from"
                ),
            )
        ckey = (cohort, flavor)
        if self.cohort_used[ckey] + demand > self.cohort_guaranteed[ckey] + EPS:
            return (
                False,
                False,
                (
                    f"team {team} is over its guaranteed {flavor} quota and cohort {cohort} "
                    "has no idle quota to lend"
                ),
            )
        return True, True, None

    def charge(self, team: str, project: str, flavor: str, amount: float) -> None:
        """Add (or with a negative amount, give back) usage."""
        self.used[(team, flavor)] += amount
        self.project_used[(team, project, flavor)] += amount
        cohort = self.cohort_of.get(team)
        if cohort is not None:
            self.cohort_used[(cohort, flavor)] += amount

    def above_guarantee(self, team: str, flavor: str) -> bool:
        """True when the team uses more than its guaranteed quota of `flavor` (it is borrowing)."""
        return self.used[(team, flavor)] > self.guaranteed.get((team, flavor), 0.0) + EPS
