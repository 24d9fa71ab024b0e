"""The demo history's money side: usage, budgets with their alerts, closed statements.

Written after the requests and runs (`portal.demo_history`), from what they ran: usage pieces
for the ledger's bulk ingest, priced as the meter prices them; budgets sized from the history
and the alerts they fired on the days they crossed 80 % and 100 %; a statement for every month
that is over. Audit events go in with the moments they happened (`insert_audit_events`).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import connection
from django.db.models import Field, Sum

from accounting.choices import ALERT_THRESHOLDS_PERCENT, BudgetUnit, OverBudgetPolicy
from accounting.models import (
    Budget,
    BudgetAlert,
    DailyUsage,
    Price,
    Statement,
    TeamMonthlyUsage,
)
from accounting.periods import (
    billing_zone,
    local_midnight,
    month_bounds,
    month_of,
    next_month,
)
from accounting.services.metering import host_prices, priced_pieces
from accounting.services.statements import write_statement
from scheduling.models import Allocation
from tenants.models import AuditEvent, Project, Team

SIX_PLACES = Decimal("0.000001")


AUDIT_COLUMNS = (
    "occurred_at",
    "actor",
    "action",
    "target_type",
    "target_id",
    "team",
    "project",
    "message",
    "data",
)


def insert_audit_events(events: list[tuple[datetime, AuditEvent]]) -> None:
    """Append past audit events, each with the moment it happened.

    Raw SQL: the model stamps `occurred_at` with the present on every INSERT (`auto_now_add`,
    also in `bulk_create`) and the trail refuses any UPDATE (a PostgreSQL trigger), so the
    history goes in through one parameterised INSERT, its values prepared by the model's fields.
    """
    fields: list[Field[Any, Any]] = [
        field
        for name in AUDIT_COLUMNS
        if isinstance(field := AuditEvent._meta.get_field(name), Field)
    ]
    columns = ", ".join(connection.ops.quote_name(str(f.column)) for f in fields)
    placeholders = ", ".join(["%s"] * len(fields))
    rows = []
    for at, event in sorted(events, key=lambda pair: pair[0]):
        event.occurred_at = at
        rows.append([f.get_db_prep_save(getattr(event, f.attname), connection) for f in fields])
    table = connection.ops.quote_name(AuditEvent._meta.db_table)
    with connection.cursor() as cursor:
        cursor.executemany(f"INSERT INTO {table} ({columns}) VALUES ({placeholders})", rows)


def usage_rows(allocations: list[Allocation]) -> list[tuple[Any, ...]]:
    """The pieces of usage of every run (one per billing day, `WITH_HOST_COSTS` columns), priced
    as the meter prices."""
    zone = billing_zone()
    prices: dict[int, list[Price]] = defaultdict(list)
    for price in Price.objects.order_by("effective_from"):
        prices[price.flavor_id].append(price)
    host = host_prices()
    rows = []
    for allocation in allocations:
        request = allocation.request
        if allocation.started_at is None or allocation.ended_at is None:
            continue
        pieces = priced_pieces(
            allocation,
            prices[request.flavor_id],
            allocation.started_at,
            allocation.ended_at,
            zone,
            host=host,
        )
        for priced in pieces:
            piece = priced.piece
            rows.append(
                (
                    allocation.pk,
                    piece.month.isoformat(),
                    piece.day.isoformat(),
                    request.team_id,
                    request.project_id,
                    request.flavor_id,
                    allocation.pool_id,
                    request.owner_id,
                    request.gpu_count,
                    allocation.is_preemptible,
                    piece.start.isoformat(),
                    piece.end.isoformat(),
                    priced.seconds.quantize(SIX_PLACES),
                    priced.gpu_hours,
                    priced.cost,
                    priced.cpu_cost,
                    priced.memory_cost,
                )
            )
    return rows


def write_budgets(
    teams: dict[str, Team],
    users: dict[str, Any],
    projects: dict[str, list[Project]],
    start: datetime,
    now: datetime,
) -> None:
    """A team money budget that past months often crossed, and a project GPU-hour budget that
    this month's work is close to: both with the alerts they fired, month by month."""
    zone = billing_zone()
    this_month = month_of(now, zone)
    vision, speech = teams["vision"], teams["speech"]
    full_months = [
        row["total"]
        for row in TeamMonthlyUsage.objects.filter(team=vision, period__lt=this_month)
        .values("period")
        .annotate(total=Sum("cost"))
        if row["period"] >= month_of(start, zone)
    ]
    typical = max(full_months, default=Decimal(1000))
    money = Budget(
        team=vision,
        unit=BudgetUnit.MONEY,
        amount=max(Decimal(100), (typical * Decimal("0.009")).quantize(Decimal(1)) * 100),
        over_budget_policy=OverBudgetPolicy.NOTIFY,
    )
    asr = projects["speech"][0]
    month_to_date = DailyUsage.objects.filter(project=asr, day__gte=this_month).aggregate(
        total=Sum("gpu_hours")
    )["total"] or Decimal(0)
    hours = Budget(
        team=speech,
        project=asr,
        unit=BudgetUnit.GPU_HOURS,
        amount=max(Decimal(5), (month_to_date / Decimal("0.85")).quantize(Decimal(1))),
        over_budget_policy=OverBudgetPolicy.NOTIFY,
    )
    created = [(money, users["bob"]), (hours, users["dan"])]
    Budget.objects.bulk_create([budget for budget, _ in created])
    Budget.objects.filter(pk__in=[b.pk for b, _ in created]).update(created_at=start)
    events: list[tuple[datetime, AuditEvent]] = []
    for budget, lead in created:
        events.append(
            (
                start,
                AuditEvent(
                    actor=lead,
                    action="budget.created",
                    target_type="Budget",
                    target_id=str(budget.pk),
                    team=budget.team,
                    project=budget.project,
                    data={
                        "unit": budget.unit,
                        "amount": str(budget.amount),
                        "policy": budget.over_budget_policy,
                    },
                ),
            )
        )
        events += _alerts_of(budget, start=start, now=now)
    insert_audit_events(events)


def _alerts_of(budget: Budget, *, start: datetime, now: datetime) -> list[tuple[datetime, Any]]:
    """The 80 % and 100 % alerts the budget fired each month, on the day it crossed them."""
    zone = billing_zone()
    rows = DailyUsage.objects.filter(team=budget.team, day__gte=start.astimezone(zone).date())
    if budget.project_id:
        rows = rows.filter(project_id=budget.project_id)
    column = "gpu_hours" if budget.unit == BudgetUnit.GPU_HOURS else "cost"
    spent: dict[Any, Decimal] = defaultdict(Decimal)
    events = []
    owner = budget.project or budget.team
    unit = "GPU-hours" if budget.unit == BudgetUnit.GPU_HOURS else budget.get_unit_display()
    per_day = rows.values("day").annotate(total=Sum(column)).order_by("day")
    for row in per_day:
        month = row["day"].replace(day=1)
        before = spent[month]
        spent[month] += row["total"]
        for threshold in ALERT_THRESHOLDS_PERCENT:
            line = budget.amount * threshold / 100
            if not before < line <= spent[month]:
                continue
            fired = min(local_midnight(row["day"], zone) + timedelta(hours=18), now)
            alert = BudgetAlert.objects.create(
                budget=budget, period=month, threshold_percent=threshold, spent=spent[month]
            )
            BudgetAlert.objects.filter(pk=alert.pk).update(fired_at=fired)
            message = (
                f"The {month:%Y-%m} budget of {owner} is at {threshold} %: "
                f"{spent[month].quantize(Decimal('0.01'))} of {budget.amount} {unit}."
            )
            event = AuditEvent(
                action=f"budget.alert_{threshold}",
                target_type="Budget",
                target_id=str(budget.pk),
                team=budget.team,
                project=budget.project,
                message=message,
                data={
                    "period": f"{month:%Y-%m}",
                    "spent": str(spent[month]),
                    "amount": str(budget.amount),
                },
            )
            events.append((fired, event))
    return events


def close_months(teams: dict[str, Team], closer: Any, start: datetime, now: datetime) -> None:
    """Finance closed every month that is over on the second day of the next one.

    The statement `close_statement` writes (`write_statement`: the month's rollup per project ×
    flavor × pool, names copied), dated when it was closed: the service stamps the present, and
    the audit trail takes no backdating UPDATE.
    """
    zone = billing_zone()
    this_month = month_of(now, zone)
    month = month_of(start, zone)
    events: list[tuple[datetime, AuditEvent]] = []
    while month < this_month:
        closed_at = month_bounds(next_month(month), zone)[0] + timedelta(days=1, hours=9)
        closed_at = min(closed_at, now)
        for team in teams.values():
            statement, lines = write_statement(team=team, month=month, closed_by=closer)
            Statement.objects.filter(pk=statement.pk).update(closed_at=closed_at)
            event = AuditEvent(
                actor=closer,
                action="statement.closed",
                target_type="Statement",
                target_id=str(statement.pk),
                team=team,
                message=f"{team} {month:%Y-%m}: {statement.cost} {statement.currency}",
                data={"period": f"{month:%Y-%m}", "lines": lines, "cost": str(statement.cost)},
            )
            events.append((closed_at, event))
        month = next_month(month)
    insert_audit_events(events)
