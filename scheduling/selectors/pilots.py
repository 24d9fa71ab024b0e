"""Pilot pools: a pool tried out with a few teams before it is opened to every team of its tier.

A pool marked `is_pilot` serves only its `pilot_teams` up to and including `pilot_until`. The
day after, the pilot is over and the pool widens: every team its tier allows may submit (an
admin who wants it closed instead retires its flavors). Without an end date the pilot lasts
until an admin clears the mark. See docs/sharing-report.md.
"""

from __future__ import annotations

from datetime import date

from scheduling.models import NodePool
from tenants.models import Team


def pilot_in_force(pool: NodePool, *, today: date) -> bool:
    """Whether the pool is a pilot on `today` (its last day included)."""
    return pool.is_pilot and (pool.pilot_until is None or today <= pool.pilot_until)


def pilot_refusal(*, pool: NodePool, team: Team, today: date) -> str | None:
    """Why `team` may not submit to the pool's flavors today, or None if it may."""
    if not pilot_in_force(pool, today=today):
        return None
    if pool.pilot_teams.filter(pk=team.pk).exists():
        return None
    until = f" until {pool.pilot_until:%Y-%m-%d}" if pool.pilot_until else ""
    return f"Pool {pool} is a pilot for other teams{until}; team {team} is not in it."
