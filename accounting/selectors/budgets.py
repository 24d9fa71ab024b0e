"""Budgets, the reads: this month's burn of each budget, the budgets that bind a project, and
the strictest policy among those used up.

Burn is read from `MonthlyUsage` (kept current by the meter), so it lags the truth by at most
one metering interval. The writes, the alerts and the submission hook are in
`accounting.services.budgets`.
"""

from __future__ import annotations

from datetime import date
from decimal import Decimal

from django.db.models import (
    Case,
    DecimalField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Coalesce

from accounting.choices import POLICY_STRICTNESS, BudgetUnit
from accounting.models import Budget, MonthlyUsage
from accounting.selectors.usage import current_month
from tenants.models import Project

AMOUNT: DecimalField[Decimal, Decimal] = DecimalField(max_digits=18, decimal_places=6)


def _spent(column: str, *, month: date, by_project: bool) -> Subquery:
    key = "project_id" if by_project else "team_id"
    rows = (
        MonthlyUsage.objects.filter(period=month, **{key: OuterRef(key)})
        .order_by()
        .values(key)
        .annotate(total=Sum(column))
        .values("total")[:1]
    )
    return Subquery(rows, output_field=AMOUNT)


def with_burn(budgets: QuerySet[Budget], *, month: date | None = None) -> QuerySet[Budget]:
    """Annotate `spent_gpu_hours` and `spent_cost` of the month (one query, no N+1)."""
    month = month or current_month()
    zero = Value(Decimal(0), output_field=AMOUNT)
    annotations = {}
    for name, column in (("spent_gpu_hours", "gpu_hours"), ("spent_cost", "cost")):
        annotations[name] = Coalesce(
            Case(
                When(project__isnull=True, then=_spent(column, month=month, by_project=False)),
                default=_spent(column, month=month, by_project=True),
                output_field=AMOUNT,
            ),
            zero,
            output_field=AMOUNT,
        )
    return budgets.annotate(**annotations)


def spent_of(budget: Budget) -> Decimal:
    """What the budget's unit counts of this month's use (needs `with_burn`)."""
    value = (
        budget.spent_gpu_hours  # type: ignore[attr-defined]
        if budget.unit == BudgetUnit.GPU_HOURS
        else budget.spent_cost  # type: ignore[attr-defined]
    )
    return Decimal(value or 0)


def percent_used(budget: Budget) -> Decimal:
    return (spent_of(budget) * 100 / budget.amount).quantize(Decimal("0.1"))


def budgets_of_project(project: Project) -> QuerySet[Budget]:
    """The budgets that bind work in a project: the team's own and the project's."""
    return Budget.objects.filter(team_id=project.team_id).filter(
        Q(project__isnull=True) | Q(project=project)
    )


def exhausted_policy(*, project: Project, month: date | None = None) -> str | None:
    """The strictest policy among the project's budgets used up this month, else None.

    Every submission asks; most teams set no budget, and for them an existence check is all
    it costs.
    """
    budgets = budgets_of_project(project)
    if not budgets.exists():
        return None
    exhausted = [
        budget.over_budget_policy
        for budget in with_burn(budgets, month=month)
        if spent_of(budget) >= budget.amount
    ]
    return max(exhausted, key=POLICY_STRICTNESS.__getitem__) if exhausted else None
