"""Idle capacity cost shared back to the teams, so that what the teams are charged plus their
idle shares is the fleet's capacity cost.

Each pool's idle cost is split on its own, by one rule (`IDLE_COST_SHARING`):

- `usage`: by the teams' GPU-equivalent hours in the pool over the report's months;
- `guarantee`: by the teams' guaranteed GPU-equivalents in the pool's flavors (team quotas as
  they are today: quotas keep no history).

A pool that nobody used (or nobody is guaranteed) is split by the same rule over the whole
fleet, then by usage over the fleet; idle that no team can carry (no usage and no guarantee
anywhere) stays unshared and is reported as such. Amounts are split to the micro-unit with the
largest-remainder method, so the shares add up to the idle cost exactly.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, TypeVar

from django.db.models import DecimalField, ExpressionWrapper, F, QuerySet, Sum

from accounting.models import TeamMonthlyUsage
from scheduling.models import Quota
from tenants.models import Team

MICRO = Decimal("0.000001")
USAGE, GUARANTEE, OFF = "usage", "guarantee", "off"
RULES = (USAGE, GUARANTEE, OFF)
RULE_LABELS = {
    USAGE: "by usage share (each pool's idle cost by the teams' GPU-hours in it)",
    GUARANTEE: "by guarantee share (each pool's idle cost by the teams' guaranteed GPUs in it)",
}

Key = TypeVar("Key", bound=Hashable)


def split_exactly(total: Decimal, weights: dict[Key, Decimal]) -> dict[Key, Decimal]:
    """`total` (6 places) split in proportion to the positive weights, to the micro-unit, adding
    up to `total` exactly (largest remainder; ties by key order). No positive weight: {}."""
    positive = {key: weight for key, weight in weights.items() if weight > 0}
    whole = sum(positive.values(), Decimal(0))
    if not positive:
        return {}
    units = int((total / MICRO).to_integral_value())
    raw = {key: Decimal(units) * weight / whole for key, weight in positive.items()}
    floors = {key: int(value) for key, value in raw.items()}
    left = units - sum(floors.values())
    by_remainder = sorted(positive, key=lambda key: (floors[key] - raw[key], str(key)))
    for key in by_remainder[:left]:
        floors[key] += 1
    return {key: Decimal(value) * MICRO for key, value in floors.items()}


@dataclass(frozen=True, slots=True)
class IdleSharing:
    """The idle cost shared back: the rule, the totals that reconcile, and each team's part.

    `allocated_cost + shared_cost + unshared_cost == capacity_cost` (the fleet's cost)."""

    rule: str
    rule_label: str
    allocated_cost: Decimal
    idle_cost: Decimal
    shared_cost: Decimal
    unshared_cost: Decimal
    capacity_cost: Decimal
    teams: list[dict[str, Any]]

    def as_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "rule_label": self.rule_label,
            "allocated_cost": self.allocated_cost,
            "idle_cost": self.idle_cost,
            "shared_cost": self.shared_cost,
            "unshared_cost": self.unshared_cost,
            "capacity_cost": self.capacity_cost,
            "teams": self.teams,
        }


def _by_pool_and_team(rows: Iterable[tuple[int, int, Any]]) -> dict[int, dict[int, Decimal]]:
    weights: dict[int, dict[int, Decimal]] = {}
    for pool_id, team_id, value in rows:
        pool = weights.setdefault(pool_id, {})
        pool[team_id] = pool.get(team_id, Decimal(0)) + Decimal(value or 0)
    return weights


def _fleet_wide(weights: dict[int, dict[int, Decimal]]) -> dict[int, Decimal]:
    fleet: dict[int, Decimal] = {}
    for pool in weights.values():
        for team_id, value in pool.items():
            fleet[team_id] = fleet.get(team_id, Decimal(0)) + value
    return fleet


def share_idle(
    *, team_usage: QuerySet[TeamMonthlyUsage], idle: list[dict[str, Any]], rule: str
) -> IdleSharing:
    """Each pool's idle cost split over the teams by `rule`; the teams' charged cost beside.
    `team_usage` is the report's months (and pool or cluster) of the team rollup."""
    usage_rows = list(
        team_usage.values("pool_id", "team_id")
        .annotate(hours=Sum("gpu_hours"), cost=Sum("cost"))
        .values_list("pool_id", "team_id", "hours", "cost")
    )
    usage = _by_pool_and_team((pool, team, hours) for pool, team, hours, _ in usage_rows)
    charged: dict[int, Decimal] = {}
    for _, team_id, _, cost in usage_rows:
        charged[team_id] = charged.get(team_id, Decimal(0)) + Decimal(cost or 0)
    if rule == GUARANTEE:
        primary = _by_pool_and_team(
            Quota.objects.filter(project__isnull=True, guaranteed__gt=0)
            .annotate(
                units=ExpressionWrapper(
                    F("guaranteed") * F("flavor__gpu_equivalent"),
                    output_field=DecimalField(max_digits=18, decimal_places=6),
                )
            )
            .values_list("flavor__pool_id", "team_id", "units")
        )
    else:
        primary = usage
    fallbacks = [_fleet_wide(primary), _fleet_wide(usage)]
    shares: dict[int, Decimal] = {}
    unshared = Decimal(0)
    for pool in idle:
        cost = pool["idle_cost"]
        weights = primary.get(pool["pool_id"], {})
        for candidate in (weights, *fallbacks):
            split = split_exactly(cost, candidate)
            if split:
                break
        if not split:
            unshared += cost
        for team_id, part in split.items():
            shares[team_id] = shares.get(team_id, Decimal(0)) + part
    names = dict(Team.objects.filter(pk__in=set(shares) | set(charged)).values_list("pk", "name"))
    teams = [
        {
            "team_id": team_id,
            "team": names.get(team_id, ""),
            "charged_cost": charged.get(team_id, Decimal(0)).quantize(MICRO),
            "idle_share": shares.get(team_id, Decimal(0)),
            "cost_with_idle": (
                charged.get(team_id, Decimal(0)) + shares.get(team_id, Decimal(0))
            ).quantize(MICRO),
        }
        for team_id in sorted(set(shares) | set(charged), key=lambda pk: (names.get(pk, ""), pk))
    ]
    allocated = sum((team["charged_cost"] for team in teams), Decimal(0))
    idle_cost = sum((pool["idle_cost"] for pool in idle), Decimal(0))
    return IdleSharing(
        rule=rule,
        rule_label=RULE_LABELS[rule],
        allocated_cost=allocated,
        idle_cost=idle_cost,
        shared_cost=idle_cost - unshared,
        unshared_cost=unshared,
        capacity_cost=allocated + idle_cost,
        teams=teams,
    )


def attach_to_rows(
    rows: list[dict[str, Any]], *, sharing: IdleSharing, group_by: tuple[str, ...]
) -> None:
    """Give each team-keyed row its part of its team's idle share (split over the team's rows
    by their cost, then GPU-hours, adding up exactly) and its cost with idle. A team with a
    share but no row of usage (a guarantee it did not use) gets a row of its own."""
    by_team: dict[int, list[int]] = {}
    for index, row in enumerate(rows):
        by_team.setdefault(row["team_id"], []).append(index)
    for team in sharing.teams:
        if team["idle_share"] and team["team_id"] not in by_team:
            empty: dict[str, Any] = {}
            for key in group_by:
                empty[f"{key}_id"], empty[key] = None, ""
            empty.update(team_id=team["team_id"], team=team["team"])
            empty.update(gpu_hours=Decimal(0), cost=Decimal(0))
            by_team[team["team_id"]] = [len(rows)]
            rows.append(empty)
    share_of = {team["team_id"]: team["idle_share"] for team in sharing.teams}
    for team_id, indexes in by_team.items():
        share = share_of.get(team_id, Decimal(0))
        parts = split_exactly(share, {i: rows[i]["cost"] for i in indexes}) or split_exactly(
            share, {i: rows[i]["gpu_hours"] for i in indexes}
        )
        if not parts and share:
            parts = {indexes[0]: share}
        for index in indexes:
            part = parts.get(index, Decimal(0))
            rows[index]["idle_share"] = part
            rows[index]["cost_with_idle"] = rows[index]["cost"] + part
