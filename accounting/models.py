"""Prices of flavors, the usage ledger metered from allocations, and its rollups.

The ledger has one row per (allocation, billing month): what one attempt of a request ran in that
month. Rollups add the same amounts up per team × project × flavor × pool and month (and day), so
reports never scan ledger rows. See docs/accounting.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q

from accounting.choices import BudgetUnit, HostResource, OverBudgetPolicy
from scheduling.choices import Priority
from scheduling.models import Allocation, CatalogQuerySet, Flavor, GpuRequest, NodePool
from tenants.models import Project, ScopedQuerySet, Team
from tenants.scope import Scope


class Price(models.Model):
    """The hourly price of one unit of a flavor from `effective_from` on; never rewritten."""

    flavor = models.ForeignKey(Flavor, on_delete=models.CASCADE, related_name="prices")
    price_per_hour = models.DecimalField(max_digits=10, decimal_places=4)
    currency = models.CharField(max_length=3, default=settings.PORTAL_CURRENCY)
    effective_from = models.DateTimeField()
    preemptible_multiplier = models.DecimalField(
        max_digits=5,
        decimal_places=4,
        default=Decimal(1),
        help_text="Applied to preemptible (borrowed) work, e.g. 0.5 for half price.",
    )
    priority_multipliers = models.JSONField(
        default=dict,
        blank=True,
        help_text='Per request priority, e.g. {"high": "1.5", "critical": "2"}; others pay 1×.',
    )

    objects = CatalogQuerySet.as_manager()

    class Meta:
        ordering = ["flavor__name", "-effective_from"]
        constraints = [
            models.UniqueConstraint(
                fields=["flavor", "effective_from"],
                name="price_one_per_flavor_and_start",
                violation_error_message="The flavor already has a price starting at this time.",
            ),
            models.CheckConstraint(
                condition=Q(price_per_hour__gte=0),
                name="price_not_negative",
                violation_error_message="A price cannot be negative.",
            ),
            models.CheckConstraint(
                condition=Q(preemptible_multiplier__gte=0),
                name="price_multiplier_not_negative",
                violation_error_message="A multiplier cannot be negative.",
            ),
        ]

    def __str__(self) -> str:
        since = f"{self.effective_from:%Y-%m-%d}"
        rate = self.price_per_hour
        amount = f"{rate:.2f}" if rate == round(rate, 2) else f"{rate.normalize():f}"
        return f"{self.flavor} {amount} {self.currency}/h from {since}"

    def clean(self) -> None:
        multipliers = self.priority_multipliers
        if not isinstance(multipliers, dict):
            raise ValidationError({"priority_multipliers": "Give an object of priority: factor."})
        unknown = sorted(set(multipliers) - set(Priority.values))
        if unknown:
            raise ValidationError(
                {
                    "priority_multipliers": f"Unknown priorities: {', '.join(unknown)} "
                    f"(use {', '.join(Priority.values)})."
                }
            )
        for priority, factor in multipliers.items():
            try:
                valid = Decimal(str(factor)) >= 0
            except InvalidOperation:
                valid = False
            if not valid:
                raise ValidationError(
                    {"priority_multipliers": f"The {priority} factor must be a number ≥ 0."}
                )

    def multiplier_for(self, priority: str) -> Decimal:
        """The factor a request of `priority` pays on top of the price (1 unless set)."""
        return Decimal(str(self.priority_multipliers.get(priority, 1)))

    def hourly_rate(self, *, gpu_count: int, priority: str, preemptible: bool) -> Decimal:
        """What a request of that size and priority pays an hour at this price."""
        rate = self.price_per_hour * gpu_count * self.multiplier_for(priority)
        return rate * self.preemptible_multiplier if preemptible else rate


SIX_PLACES = Decimal("0.000001")
MILLICORES_PER_CORE = Decimal(1000)
MIB_PER_GIB = Decimal(1024)


def cost_of(*, rate_per_hour: Decimal, hours: Decimal) -> Decimal:
    """The one pricing rule: a rate per hour (already × units) over some hours, rounded to
    6 places per piece. The meter, the request page and storage all price through it."""
    return (rate_per_hour * hours).quantize(SIX_PLACES)


class ResourcePrice(models.Model):
    """The hourly price of one unit of CPU (core), memory (GiB) or storage (GiB claimed) from
    `effective_from` on; never rewritten once in effect, like a flavor's `Price`."""

    resource = models.CharField(max_length=10, choices=HostResource.choices)
    price_per_hour = models.DecimalField(
        max_digits=12,
        decimal_places=8,
        help_text="Per core-hour (CPU), GiB-hour (memory) or GiB-hour of claimed volume (storage).",
    )
    currency = models.CharField(max_length=3, default=settings.PORTAL_CURRENCY)
    effective_from = models.DateTimeField()

    objects = CatalogQuerySet.as_manager()

    class Meta:
        ordering = ["resource", "-effective_from"]
        constraints = [
            models.UniqueConstraint(
                fields=["resource", "effective_from"],
                name="resource_price_one_per_start",
                violation_error_message="This resource already has a price starting at this time.",
            ),
            models.CheckConstraint(
                condition=Q(price_per_hour__gte=0),
                name="resource_price_not_negative",
                violation_error_message="A price cannot be negative.",
            ),
        ]

    def __str__(self) -> str:
        unit = {"cpu": "core-h", "memory": "GiB-h", "storage": "GiB-h"}[self.resource]
        return f"{self.resource} {self.price_per_hour} {self.currency}/{unit} from " + (
            f"{self.effective_from:%Y-%m-%d}"
        )

    def hourly_rate(self, *, quantity: Decimal) -> Decimal:
        """What `quantity` units (cores, GiB) pay an hour at this price."""
        return self.price_per_hour * quantity


@dataclass(frozen=True, slots=True)
class HourlyRates:
    """What a request pays an hour, by part, at the prices in force at one moment."""

    gpu: Decimal
    cpu: Decimal
    memory: Decimal

    @property
    def total(self) -> Decimal:
        return self.gpu + self.cpu + self.memory


def hourly_rates(
    *,
    request: GpuRequest,
    preemptible: bool,
    price: Price | None,
    cpu_price: ResourcePrice | None,
    memory_price: ResourcePrice | None,
) -> HourlyRates:
    """A request's rates: its flavor units at the flavor's price (with multipliers), its
    requested cores and GiB of memory at the CPU and memory prices; unpriced parts pay 0."""
    cores = Decimal(request.cpu_millicores or 0) / MILLICORES_PER_CORE
    gib = Decimal(request.memory_mib or 0) / MIB_PER_GIB
    return HourlyRates(
        gpu=Decimal(0)
        if price is None
        else price.hourly_rate(
            gpu_count=request.gpu_count, priority=request.priority, preemptible=preemptible
        ),
        cpu=Decimal(0) if cpu_price is None else cpu_price.hourly_rate(quantity=cores),
        memory=Decimal(0) if memory_price is None else memory_price.hourly_rate(quantity=gib),
    )


#: The host CPU and memory parts of a ledger or rollup row's `cost` (GPU cost = cost − both).
#: Zero in the database by default, so imported usage (whose file has one cost) is all GPU.
PART_OF_COST: dict[str, Any] = {
    "max_digits": 18,
    "decimal_places": 6,
    "default": Decimal(0),
    "db_default": Decimal(0),
}


class AllocationMeter(models.Model):
    """How far one allocation has been metered; `is_final` once its whole interval is in."""

    allocation = models.OneToOneField(Allocation, on_delete=models.CASCADE, related_name="meter")
    metered_until = models.DateTimeField()
    is_final = models.BooleanField(default=False, db_index=True)

    def __str__(self) -> str:
        return f"meter of {self.allocation_id} until {self.metered_until:%Y-%m-%d %H:%M}"


class UsageQuerySet(ScopedQuerySet):
    def for_scope(self, scope: Scope) -> UsageQuerySet:
        """Finance and admins see every team's usage, leads their teams', developers their own."""
        if scope.sees_all_tenants:
            return self.all()
        return self.filter(Q(team_id__in=scope.lead_team_ids) | Q(owner_id=scope.user_id)).filter(
            team_id__in=scope.team_ids
        )


class UsageRecord(models.Model):
    """What one allocation ran in one billing month: GPU-equivalent hours and their cost.

    Unique per (allocation, period), and grown only by the meter from its cursor (or by
    `import_usage`), so an interval is never counted twice. Team, project, flavor, pool and owner
    are real foreign keys that PROTECT: history cannot lose them. The allocation reference has
    no database constraint: billing history outlives deleted requests, and imported usage names
    allocations of other clusters.
    """

    allocation = models.ForeignKey(
        Allocation,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,  # the (allocation, period) unique index serves it
        related_name="usage_records",
    )
    period = models.DateField(help_text="First day of the billing month (billing time zone).")
    team = models.ForeignKey(
        Team,
        on_delete=models.PROTECT,
        related_name="+",
        db_index=False,  # usage_record_team_idx (team, period) leads with it
    )
    # Project, flavor and pool keep their own index: deleting one (refused while usage exists)
    # looks the ledger up by that column alone, and so does the database's foreign-key check.
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="+")
    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="+")
    pool = models.ForeignKey(NodePool, on_delete=models.PROTECT, related_name="+")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        related_name="+",
        db_index=False,  # usage_record_owner_idx (owner, period) leads with it
    )
    gpu_count = models.PositiveIntegerField()
    is_preemptible = models.BooleanField(default=False)
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField()
    seconds = models.DecimalField(max_digits=14, decimal_places=6)
    gpu_hours = models.DecimalField(max_digits=18, decimal_places=6)
    cost = models.DecimalField(
        max_digits=18, decimal_places=6, help_text="GPU + CPU + memory cost (metered)."
    )
    cpu_cost = models.DecimalField(**PART_OF_COST)
    memory_cost = models.DecimalField(**PART_OF_COST)

    objects = UsageQuerySet.as_manager()

    class Meta:
        ordering = ["-period", "allocation_id"]
        indexes = [
            models.Index(fields=["owner", "period"], name="usage_record_owner_idx"),
            models.Index(fields=["team", "period"], name="usage_record_team_idx"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["allocation", "period"],
                name="usage_record_one_per_allocation_period",
                violation_error_message="This allocation already has usage for this period.",
            ),
            models.CheckConstraint(
                condition=Q(seconds__gte=0) & Q(gpu_hours__gte=0) & Q(cost__gte=0),
                name="usage_record_not_negative",
                violation_error_message="Usage cannot be negative.",
            ),
        ]

    def __str__(self) -> str:
        return f"usage of allocation {self.allocation_id} in {self.period:%Y-%m}"


class LeadScopedQuerySet(ScopedQuerySet):
    """Team-level figures (rollups, statements): finance and admins all, leads their teams,
    developers none."""

    def for_scope(self, scope: Scope) -> LeadScopedQuerySet:
        if scope.sees_all_tenants:
            return self.all()
        return self.filter(team_id__in=scope.lead_team_ids)


class UsageRollup(models.Model):
    """Sums of usage per team × project × flavor × pool over one bucket (month or day).

    Derived from the ledger in the same transaction; its keys are real foreign keys that
    PROTECT, each the leading column of some index (a delete looks them up by that column).
    """

    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="+")
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="+")
    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="+")
    pool = models.ForeignKey(NodePool, on_delete=models.PROTECT, related_name="+")
    gpu_hours = models.DecimalField(max_digits=18, decimal_places=6)
    cost = models.DecimalField(max_digits=18, decimal_places=6)
    cpu_cost = models.DecimalField(**PART_OF_COST)
    memory_cost = models.DecimalField(**PART_OF_COST)

    objects = LeadScopedQuerySet.as_manager()

    class Meta:
        abstract = True


class MonthlyUsage(UsageRollup):
    """Usage per team × project × flavor × pool and billing month."""

    period = models.DateField(help_text="First day of the billing month.")

    class Meta:
        ordering = ["-period", "team_id", "project_id", "flavor_id"]
        indexes = [models.Index(fields=["period", "team"], name="monthly_usage_period_team_idx")]
        constraints = [
            models.UniqueConstraint(
                fields=["period", "team", "project", "flavor", "pool"],
                name="monthly_usage_one_per_key",
                violation_error_message="This month already has a row for this key.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.period:%Y-%m} {self.project_id}/{self.flavor_id}: {self.gpu_hours} h"


class DailyUsage(UsageRollup):
    """Usage per team × project × flavor × pool and day (billing time zone): chart series."""

    day = models.DateField()
    team = models.ForeignKey(
        Team,
        on_delete=models.PROTECT,
        related_name="+",
        db_index=False,  # daily_usage_one_per_key (team, project, day, …) leads with it
    )

    class Meta:
        ordering = ["-day", "team_id", "project_id", "flavor_id"]
        # The key serves the reads: a team's days (budget burn-down, a lead's series) and a
        # project's days (the series filter adds the project's team). The project, flavor and
        # pool indexes serve only deletes (refused while usage exists). Day ranges over all
        # teams read a BRIN index on `day` (PostgreSQL only, migration 0007).
        constraints = [
            models.UniqueConstraint(
                fields=["team", "project", "day", "flavor", "pool"],
                name="daily_usage_one_per_key",
                violation_error_message="This day already has a row for this key.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.project_id}/{self.flavor_id}: {self.gpu_hours} h"


class TeamMonthlyUsage(models.Model):
    """Usage per team × flavor × pool and billing month: what chargeback reads.

    The same sums as `MonthlyUsage` without the project, so a month is ~teams × flavors rows
    (2,000 at 200 teams and 10 flavors) instead of ~projects × flavors; team-level reports that do
    not group or filter by project read this table. Kept current by the meter and the bulk ingest
    in the same transaction as the ledger (docs/accounting.md).
    """

    period = models.DateField(help_text="First day of the billing month.")
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="+")
    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="+")
    pool = models.ForeignKey(NodePool, on_delete=models.PROTECT, related_name="+")
    gpu_hours = models.DecimalField(max_digits=18, decimal_places=6)
    cost = models.DecimalField(max_digits=18, decimal_places=6)
    cpu_cost = models.DecimalField(**PART_OF_COST)
    memory_cost = models.DecimalField(**PART_OF_COST)

    objects = LeadScopedQuerySet.as_manager()

    class Meta:
        ordering = ["-period", "team_id", "flavor_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["period", "team", "flavor", "pool"],
                name="team_monthly_usage_one_per_key",
                violation_error_message="This month already has a row for this key.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.period:%Y-%m} team {self.team_id}/{self.flavor_id}: {self.gpu_hours} h"


# Budgets and statements --------------------------------------------------------------------


class BudgetQuerySet(ScopedQuerySet):
    def for_scope(self, scope: Scope) -> BudgetQuerySet:
        """Finance and admins all; leads their teams'; developers their teams' project budgets."""
        if scope.sees_all_tenants:
            return self.all()
        return self.filter(
            Q(team_id__in=scope.lead_team_ids)
            | Q(team_id__in=scope.team_ids, project__isnull=False)
        )


class Budget(models.Model):
    """A monthly ceiling on a team's (no project) or one project's GPU-hours or money.

    Burn is read from the monthly rollup of the current billing month; alerts fire at 80 % and
    100 % once per month each (`BudgetAlert`); past 100 % `over_budget_policy` shapes new work.
    """

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="budgets")
    project = models.ForeignKey(
        Project, on_delete=models.CASCADE, null=True, blank=True, related_name="budgets"
    )
    unit = models.CharField(max_length=10, choices=BudgetUnit.choices)
    amount = models.DecimalField(max_digits=14, decimal_places=2)
    over_budget_policy = models.CharField(
        max_length=20, choices=OverBudgetPolicy.choices, default=OverBudgetPolicy.NOTIFY
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = BudgetQuerySet.as_manager()

    class Meta:
        ordering = ["team__name", "project__name", "unit"]
        constraints = [
            models.UniqueConstraint(
                fields=["team", "unit"],
                condition=Q(project__isnull=True),
                name="budget_one_per_team_and_unit",
                violation_error_message="The team already has a budget in this unit.",
            ),
            models.UniqueConstraint(
                fields=["project", "unit"],
                condition=Q(project__isnull=False),
                name="budget_one_per_project_and_unit",
                violation_error_message="The project already has a budget in this unit.",
            ),
            models.CheckConstraint(
                condition=Q(amount__gt=0),
                name="budget_amount_positive",
                violation_error_message="A budget must be more than zero.",
            ),
        ]

    def __str__(self) -> str:
        owner = self.project if self.project_id else self.team
        return f"budget of {owner}: {self.amount} {self.unit}/month"


class BudgetAlert(models.Model):
    """That a budget crossed a threshold in a month: written once, so the alert fires once."""

    budget = models.ForeignKey(Budget, on_delete=models.CASCADE, related_name="alerts")
    period = models.DateField(help_text="First day of the billing month.")
    threshold_percent = models.PositiveSmallIntegerField()
    spent = models.DecimalField(max_digits=18, decimal_places=6)
    fired_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-fired_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["budget", "period", "threshold_percent"],
                name="budget_alert_once_per_month",
                violation_error_message="This alert already fired this month.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.budget} at {self.threshold_percent}% in {self.period:%Y-%m}"


class Statement(models.Model):
    """A team's closed (frozen) monthly statement: copies of the month's totals at closing.

    Later metering or repricing changes the ledger and the rollups (the truth) but never a
    closed statement: its lines are copies, names included.
    """

    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="statements")
    period = models.DateField(help_text="First day of the billing month.")
    currency = models.CharField(max_length=3)
    gpu_hours = models.DecimalField(max_digits=18, decimal_places=6)
    cost = models.DecimalField(max_digits=18, decimal_places=6)
    closed_at = models.DateTimeField(auto_now_add=True)
    closed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )

    objects = LeadScopedQuerySet.as_manager()

    class Meta:
        ordering = ["-period", "team__name"]
        constraints = [
            models.UniqueConstraint(
                fields=["team", "period"],
                name="statement_one_per_team_and_month",
                violation_error_message="The team's statement for this month is closed already.",
            ),
        ]

    def __str__(self) -> str:
        return f"statement of {self.team} for {self.period:%Y-%m}"


class StatementLine(models.Model):
    """One frozen line of a statement: a project × flavor × pool total, names copied."""

    statement = models.ForeignKey(Statement, on_delete=models.CASCADE, related_name="lines")
    project_id_copy = models.PositiveBigIntegerField()
    project_name = models.CharField(max_length=100)
    flavor_name = models.CharField(max_length=60)
    pool_name = models.CharField(max_length=60)
    gpu_hours = models.DecimalField(max_digits=18, decimal_places=6)
    cost = models.DecimalField(max_digits=18, decimal_places=6)

    class Meta:
        ordering = ["statement", "project_name", "flavor_name", "pool_name"]

    def __str__(self) -> str:
        return f"{self.project_name} {self.flavor_name}: {self.cost}"
