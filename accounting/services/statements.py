"""Closable monthly statements: finance freezes a team's month into copied line items.

Closing copies the month's `MonthlyUsage` totals per project × flavor × pool, names included,
into `StatementLine` rows. Metering that arrives later for that month (late samples, a backfill)
and repricing still change the ledger and the rollups, which stay the truth, but never a closed
statement; the difference shows up as the gap between the statement and the live report.
"""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Sum

from accounting.models import MonthlyUsage, Statement, StatementLine
from accounting.selectors.usage import current_month
from tenants.errors import ConflictError, ForbiddenError
from tenants.models import Team, scope_of
from tenants.scope import Actor
from tenants.services.organisation import record_audit_event

STATEMENT_COLUMNS = ["project_id", "project", "flavor", "pool", "gpu_hours", "cost", "currency"]


@transaction.atomic
def close_statement(*, actor: Actor, team: Team, month: date) -> tuple[Statement, bool]:
    """Freeze the team's month; returns (statement, created). Closing twice changes nothing."""
    if not scope_of(actor).sees_all_tenants:
        raise ForbiddenError("forbidden", "Only finance or a platform admin may close a month.")
    if month >= current_month():
        raise ConflictError(
            "month_not_over",
            f"{month:%Y-%m} is not over yet; a month can be closed from its end on.",
            fields={"month": "not over"},
        )
    Team.objects.select_for_update().get(pk=team.pk)  # one closer per team at a time
    existing = Statement.objects.filter(team=team, period=month).first()
    if existing is not None:
        return existing, False
    statement, lines = write_statement(team=team, month=month, closed_by=actor)
    record_audit_event(
        actor=actor,
        action="statement.closed",
        target=statement,
        team=team,
        message=f"{team} {month:%Y-%m}: {statement.cost} {statement.currency}",
        data={"period": f"{month:%Y-%m}", "lines": lines, "cost": str(statement.cost)},
    )
    return statement, True


def write_statement(*, team: Team, month: date, closed_by: Any) -> tuple[Statement, int]:
    """Copy the team's month from `MonthlyUsage` into a statement and its lines, as they stand
    now; returns the statement and its number of lines. No checks: `close_statement` makes them."""
    sums = (
        MonthlyUsage.objects.filter(team=team, period=month)
        .values("project_id", "project__name", "flavor__name", "pool__name")
        .annotate(gpu_hours=Sum("gpu_hours"), cost=Sum("cost"))
        .order_by("project__name", "flavor__name", "pool__name")
    )
    lines = [
        StatementLine(
            project_id_copy=row["project_id"],
            project_name=row["project__name"],
            flavor_name=row["flavor__name"],
            pool_name=row["pool__name"],
            gpu_hours=row["gpu_hours"],
            cost=row["cost"],
        )
        for row in sums
    ]
    statement = Statement.objects.create(
        team=team,
        period=month,
        currency=settings.PORTAL_CURRENCY,
        gpu_hours=sum((line.gpu_hours for line in lines), Decimal(0)),
        cost=sum((line.cost for line in lines), Decimal(0)),
        closed_by=closed_by,
    )
    for line in lines:
        line.statement = statement
    StatementLine.objects.bulk_create(lines)
    return statement, len(lines)


def statement_rows(statement: Statement) -> list[dict[str, Any]]:
    """The frozen lines as report rows (exports and the API)."""
    return [
        {
            "project_id": line.project_id_copy,
            "project": line.project_name,
            "flavor": line.flavor_name,
            "pool": line.pool_name,
            "gpu_hours": line.gpu_hours,
            "cost": line.cost,
            "currency": statement.currency,
        }
        for line in statement.lines.all()
    ]
