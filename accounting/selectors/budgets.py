"""Budgets, the reads: this month's burn of each budget, the budgets that bind a project, and
the strictest policy among those used up.

Burn is read from `MonthlyUsage` (kept current by the meter), so it lags the truth by at most
one metering interval. The writes, the alerts and the submission hook are in
`accounting.services.budgets`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
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
from django.utils import timezone

from accounting.choices import POLICY_STRICTNESS, BudgetUnit
from accounting.models import Budget, DailyUsage, MonthlyUsage
from accounting.periods import (
    billing_zone,
    day_of,
    local_midnight,
    month_bounds,
    month_of,
    seconds_between,
)
from accounting.selectors.usage import current_month
from tenants.models import Project

AMOUNT: DecimalField[Decimal, Decimal] = DecimalField(max_digits=18, decimal_places=6)
BURN_WINDOW_DAYS = 7  # "current daily burn": the last seven billing days of the month, today in
SECONDS_A_DAY = Decimal(86400)
CENTS = Decimal("0.01")


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


def _recent(column: str, *, since: date, by_project: bool) -> Subquery:
    keys = ("team_id", "project_id") if by_project else ("team_id",)
    rows = (
        DailyUsage.objects.filter(day__gte=since, **{key: OuterRef(key) for key in keys})
        .order_by()
        .values(keys[0])
        .annotate(total=Sum(column))
        .values("total")[:1]
    )
    return Subquery(rows, output_field=AMOUNT)


def _per_budget(rows: Callable[[str, bool], Subquery], column: str) -> Coalesce:
    return Coalesce(
        Case(
            When(project__isnull=True, then=rows(column, False)),
            default=rows(column, True),
            output_field=AMOUNT,
        ),
        Value(Decimal(0), output_field=AMOUNT),
        output_field=AMOUNT,
    )


@dataclass(frozen=True, slots=True)
class BurnWindow:
    """The days the current daily burn is read from: from `since` (a local midnight, never
    before the month's start) to now."""

    since: date
    days: Decimal  # elapsed, fractional (today counts the part gone)
    days_left: Decimal  # to the month's end, fractional


def burn_window(now: datetime | None = None) -> BurnWindow:
    now = now or timezone.now()
    zone = billing_zone()
    month_start, month_end = month_bounds(month_of(now, zone), zone)
    today = day_of(now, zone)
    start = max(local_midnight(today - timedelta(days=BURN_WINDOW_DAYS - 1), zone), month_start)
    return BurnWindow(
        since=day_of(start, zone),
        days=seconds_between(start, now) / SECONDS_A_DAY,
        days_left=max(seconds_between(now, month_end), Decimal(0)) / SECONDS_A_DAY,
    )


def with_burn(
    budgets: QuerySet[Budget], *, month: date | None = None, now: datetime | None = None
) -> QuerySet[Budget]:
    """Annotate `spent_gpu_hours` and `spent_cost` of the month and `recent_gpu_hours` and
    `recent_cost` of the burn window (one query, no N+1)."""
    month = month or current_month(now)
    since = burn_window(now).since
    annotations = {}
    for column in ("gpu_hours", "cost"):
        annotations[f"spent_{column}"] = _per_budget(
            lambda c, by_project: _spent(c, month=month, by_project=by_project), column
        )
        annotations[f"recent_{column}"] = _per_budget(
            lambda c, by_project: _recent(c, since=since, by_project=by_project), column
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


@dataclass(frozen=True, slots=True)
class Forecast:
    """Month-end forecast of a budget: spent so far + the current daily burn × the days left."""

    spent: Decimal
    daily_burn: Decimal
    burn_days: Decimal
    days_left: Decimal
    amount: Decimal
    percent: Decimal

    @property
    def explanation(self) -> str:
        return (
            f"spent so far {self.spent:.2f} + {self.daily_burn:.2f} a day (the mean of the last "
            f"{self.burn_days:.1f} days) × {self.days_left:.1f} days left"
        )


def forecast_of(budget: Budget, *, now: datetime | None = None) -> Forecast:
    """The budget's month-end forecast (needs `with_burn` for the same moment)."""
    window = burn_window(now)
    recent = Decimal(
        (
            budget.recent_gpu_hours  # type: ignore[attr-defined]
            if budget.unit == BudgetUnit.GPU_HOURS
            else budget.recent_cost  # type: ignore[attr-defined]
        )
        or 0
    )
    spent = spent_of(budget)
    daily = recent / window.days if window.days > 0 else Decimal(0)
    amount = spent + daily * window.days_left
    return Forecast(
        spent=spent.quantize(CENTS),
        daily_burn=daily.quantize(CENTS),
        burn_days=window.days.quantize(Decimal("0.1")),
        days_left=window.days_left.quantize(Decimal("0.1")),
        amount=amount.quantize(CENTS),
        percent=(amount * 100 / budget.amount).quantize(Decimal("0.1")),
    )


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
