"""Query parameters of the usage and chargeback reports."""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from accounting.models import Budget, Price, ResourcePrice, Statement, StatementLine
from accounting.selectors.budgets import forecast_of, percent_used, spent_of
from accounting.selectors.efficiency import EFFICIENCY_KEYS
from accounting.selectors.usage import GROUP_KEYS, UsageQuery, current_month
from scheduling.models import Flavor
from tenants.api.base import ScopedPrimaryKeyRelatedField
from tenants.models import Project, Team

MAX_ID = 2**63 - 1


# YYYY-MM with a year from 2000 to 9000.
MONTH_PATTERN = r"^([2-8]\d{3}|9000)-(0[1-9]|1[0-2])$"
MONTH_MESSAGE = "Use YYYY-MM with a year from 2000 to 9000, e.g. 2026-12."
# Comma-separated keys of GROUP_KEYS; a key named twice counts once.
GROUP_BY_PATTERN = rf"^({'|'.join(GROUP_KEYS)})(,({'|'.join(GROUP_KEYS)}))*$"


def _parse_month(value: str) -> date:
    return date(int(value[:4]), int(value[5:7]), 1)


class UsageQuerySerializer(serializers.Serializer):
    """`month` (YYYY-MM, default this billing month), `months` back from it, ids, `group_by`
    (`request` lists each request's GPU-hours and cost, read from the ledger)."""

    month = serializers.RegexField(
        MONTH_PATTERN, required=False, error_messages={"invalid": MONTH_MESSAGE}
    )
    months = serializers.IntegerField(min_value=1, max_value=36, required=False, default=1)
    team = serializers.IntegerField(min_value=1, max_value=MAX_ID, required=False)
    project = serializers.IntegerField(min_value=1, max_value=MAX_ID, required=False)
    pool = serializers.IntegerField(min_value=1, max_value=MAX_ID, required=False)
    flavor = serializers.IntegerField(min_value=1, max_value=MAX_ID, required=False)
    cluster = serializers.IntegerField(min_value=1, max_value=MAX_ID, required=False)
    user = serializers.IntegerField(
        min_value=1,
        max_value=MAX_ID,
        required=False,
        help_text="A user's usage only (a lead: a member of their teams; a developer: "
        "themselves). With group_by=request, the per-request cost list under the user.",
    )
    group_by = serializers.RegexField(
        GROUP_BY_PATTERN,
        required=False,
        error_messages={"invalid": f"Comma-separated keys of {', '.join(GROUP_KEYS)}."},
    )
    export = serializers.ChoiceField(choices=["csv", "xlsx"], required=False)

    default_group_by: tuple[str, ...] = ("team",)

    def validate_group_by(self, value: str) -> tuple[str, ...]:
        return tuple(dict.fromkeys(value.split(",")))

    def to_query(self) -> UsageQuery:
        data: dict[str, Any] = self.validated_data
        month_to = _parse_month(data["month"]) if data.get("month") else current_month()
        month_from = month_to
        for _ in range(data["months"] - 1):
            month_from = (
                date(month_from.year - 1, 12, 1)
                if month_from.month == 1
                else month_from.replace(month=month_from.month - 1)
            )
        return UsageQuery(
            month_from=month_from,
            month_to=month_to,
            team_id=data.get("team"),
            project_id=data.get("project"),
            pool_id=data.get("pool"),
            flavor_id=data.get("flavor"),
            cluster_id=data.get("cluster"),
            user_id=data.get("user"),
            group_by=data.get("group_by") or self.default_group_by,
        )


class ChargebackQuerySerializer(UsageQuerySerializer):
    default_group_by = ("team", "flavor")


def _money() -> serializers.DecimalField:
    return serializers.DecimalField(max_digits=24, decimal_places=6, read_only=True)


class ReportRowSerializer(serializers.Serializer):
    """One group: its keys (`team_id`, `team`, … as grouped, `month`, `day`), then the sums.

    `cost` is the metered cost (GPU + CPU + memory, as before CPU and memory were priced it
    was GPU only); `gpu_cost`, `cpu_cost` and `memory_cost` are its parts; `storage_cost` the
    claimed volumes' cost; `total_cost` = `cost` + `storage_cost`."""

    gpu_hours = _money()
    cost = _money()
    gpu_cost = _money()
    cpu_cost = _money()
    memory_cost = _money()
    storage_cost = _money()
    total_cost = _money()
    idle_share = _money()
    cost_with_idle = _money()


class IdleSharingTeamSerializer(serializers.Serializer):
    team_id = serializers.IntegerField(read_only=True)
    team = serializers.CharField(read_only=True)
    charged_cost = _money()
    idle_share = _money()
    cost_with_idle = _money()


class IdleSharingSerializer(serializers.Serializer):
    """The fleet's idle cost shared back to the teams by `rule` (`IDLE_COST_SHARING`):
    `allocated_cost + shared_cost + unshared_cost = capacity_cost`."""

    rule = serializers.ChoiceField(choices=["usage", "guarantee"], read_only=True)
    rule_label = serializers.CharField(read_only=True)
    allocated_cost = _money()
    idle_cost = _money()
    shared_cost = _money()
    unshared_cost = _money()
    capacity_cost = _money()
    teams = IdleSharingTeamSerializer(many=True, read_only=True)


class ChargebackResponseSerializer(serializers.Serializer):
    """A chargeback report. `idle`, `fleet` and `idle_sharing` are null unless the report is
    fleet-wide (finance or admins, no team, project or flavor filter); `idle_sharing` is also
    null when `IDLE_COST_SHARING` is off. Rows carry `idle_share` and `cost_with_idle` only
    when it is set and the grouping has the team but neither month nor day."""

    currency = serializers.CharField(read_only=True)
    time_zone = serializers.CharField(read_only=True)
    months = serializers.ListField(child=serializers.CharField(), read_only=True)
    group_by = serializers.ListField(child=serializers.CharField(), read_only=True)
    results = ReportRowSerializer(many=True, read_only=True)
    totals = serializers.DictField(child=_money(), read_only=True)
    idle = serializers.ListField(child=serializers.DictField(), allow_null=True, read_only=True)
    fleet = serializers.DictField(child=_money(), allow_null=True, read_only=True)
    idle_sharing = IdleSharingSerializer(allow_null=True, read_only=True)


class BudgetForecastSerializer(serializers.Serializer):
    """The month-end forecast, in the budget's unit: `amount = spent + daily_burn × days_left`,
    the daily burn being the mean of the last `burn_days` days of this month (at most 7)."""

    amount = serializers.DecimalField(max_digits=24, decimal_places=2, read_only=True)
    percent = serializers.DecimalField(
        max_digits=12, decimal_places=1, read_only=True, help_text="Of the budget's amount."
    )
    spent = serializers.DecimalField(max_digits=24, decimal_places=2, read_only=True)
    daily_burn = serializers.DecimalField(max_digits=24, decimal_places=2, read_only=True)
    burn_days = serializers.DecimalField(max_digits=6, decimal_places=1, read_only=True)
    days_left = serializers.DecimalField(max_digits=6, decimal_places=1, read_only=True)
    explanation = serializers.CharField(read_only=True)


class BudgetSerializer(serializers.ModelSerializer):
    """A monthly budget and its burn this billing month (read-only figures)."""

    team = ScopedPrimaryKeyRelatedField(queryset=Team.objects.all())
    project = ScopedPrimaryKeyRelatedField(
        queryset=Project.objects.all(), allow_null=True, required=False, default=None
    )
    amount = serializers.DecimalField(
        max_digits=14, decimal_places=2, min_value=Decimal("0.01"), coerce_to_string=True
    )
    month = serializers.SerializerMethodField()
    spent = serializers.SerializerMethodField()
    percent_used = serializers.SerializerMethodField()
    is_exhausted = serializers.SerializerMethodField()
    forecast = serializers.SerializerMethodField()

    class Meta:
        model = Budget
        fields = [
            "id",
            "team",
            "project",
            "unit",
            "amount",
            "over_budget_policy",
            "month",
            "spent",
            "percent_used",
            "is_exhausted",
            "forecast",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["id", "created_at", "updated_at"]
        validators: list[Any] = []  # uniqueness: the service maps the constraint to 400

    def get_month(self, budget: Budget) -> str:
        return f"{current_month():%Y-%m}"

    def get_spent(self, budget: Budget) -> str:
        return str(spent_of(budget).quantize(Decimal("0.000001")))

    def get_percent_used(self, budget: Budget) -> str:
        return str(percent_used(budget))

    def get_is_exhausted(self, budget: Budget) -> bool:
        return spent_of(budget) >= budget.amount

    @extend_schema_field(BudgetForecastSerializer)
    def get_forecast(self, budget: Budget) -> dict[str, Any]:
        return BudgetForecastSerializer(forecast_of(budget)).data


class StatementLineSerializer(serializers.ModelSerializer):
    project_id = serializers.IntegerField(source="project_id_copy")
    project = serializers.CharField(source="project_name")
    flavor = serializers.CharField(source="flavor_name")
    pool = serializers.CharField(source="pool_name")
    gpu_hours = serializers.DecimalField(max_digits=18, decimal_places=6)
    cost = serializers.DecimalField(max_digits=18, decimal_places=6)

    class Meta:
        model = StatementLine
        fields = ["project_id", "project", "flavor", "pool", "gpu_hours", "cost"]


@extend_schema_field({"type": "string", "pattern": r"^\d{4}-(0[1-9]|1[0-2])$"})
class MonthField(serializers.DateField):
    """A date shown as its month, YYYY-MM (the schema says so; a date format would not)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(format="%Y-%m", **kwargs)


class StatementSerializer(serializers.ModelSerializer):
    month = MonthField(source="period")
    team_name = serializers.CharField(source="team.name")
    closed_by: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )
    gpu_hours = serializers.DecimalField(max_digits=18, decimal_places=6)
    cost = serializers.DecimalField(max_digits=18, decimal_places=6)
    lines = StatementLineSerializer(many=True, read_only=True)

    class Meta:
        model = Statement
        fields = [
            "id",
            "team",
            "team_name",
            "month",
            "currency",
            "gpu_hours",
            "cost",
            "closed_at",
            "closed_by",
            "lines",
        ]
        read_only_fields = fields


class StatementCloseSerializer(serializers.Serializer):
    """`team` and `month` (YYYY-MM) of the statement to close."""

    team = ScopedPrimaryKeyRelatedField(queryset=Team.objects.all())
    month = serializers.RegexField(MONTH_PATTERN, error_messages={"invalid": MONTH_MESSAGE})

    def validate_month(self, value: str) -> date:
        return _parse_month(value)


class ExportSerializer(serializers.Serializer):
    export = serializers.ChoiceField(choices=["csv", "xlsx"], required=False)


class EfficiencyQuerySerializer(serializers.Serializer):
    """`group_by` one of request, project, team; `days` back from now (samples are kept 14)."""

    group_by = serializers.ChoiceField(choices=list(EFFICIENCY_KEYS), default="project")
    days = serializers.IntegerField(min_value=1, max_value=90, default=14)


class PriceSerializer(serializers.ModelSerializer):
    """A flavor's hourly price from `effective_from` on (now when left out)."""

    flavor = ScopedPrimaryKeyRelatedField(queryset=Flavor.objects.all())
    effective_from = serializers.DateTimeField(required=False, allow_null=True, default=None)

    class Meta:
        model = Price
        fields = [
            "id",
            "flavor",
            "price_per_hour",
            "currency",
            "effective_from",
            "preemptible_multiplier",
            "priority_multipliers",
        ]
        read_only_fields = ["id"]
        # One price per flavor and start: the service checks it with the constraint's message.
        validators: list[Any] = []


class ResourcePriceSerializer(serializers.ModelSerializer):
    """The hourly price of a CPU core, a GiB of memory or a GiB of claimed storage from
    `effective_from` on (now when left out); never negative."""

    effective_from = serializers.DateTimeField(required=False, allow_null=True, default=None)
    price_per_hour = serializers.DecimalField(
        max_digits=12,
        decimal_places=8,
        min_value=Decimal(0),
        error_messages={"min_value": "A price cannot be negative."},
    )

    class Meta:
        model = ResourcePrice
        fields = ["id", "resource", "price_per_hour", "currency", "effective_from"]
        read_only_fields = ["id"]
        # One price per resource and start: the service checks it with the constraint's message.
        validators: list[Any] = []
