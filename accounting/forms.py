"""Web forms of the cost pages; the budget services re-check every rule the forms check. The
sharing report's query (`SharingQueryForm`) serves both its page and its API."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import forms
from django.conf import settings
from django.db.models import QuerySet

from accounting.choices import BudgetUnit, OverBudgetPolicy
from accounting.selectors.sharing import MAX_DAYS, SharingPeriod, sharing_period
from scheduling.models import NodePool
from tenants.errors import DomainError, show_on_form
from tenants.models import Project, Team


class _BootstrapForm(forms.Form):
    """Bootstrap classes on every widget, and `is-invalid` on the fields that failed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for field in self.fields.values():
            css = "form-select" if isinstance(field.widget, forms.Select) else "form-control"
            field.widget.attrs["class"] = css

    def full_clean(self) -> None:
        super().full_clean()
        for name in self.errors:
            if name in self.fields:
                self.fields[name].widget.attrs["class"] += " is-invalid"

    def add_domain_error(self, error: DomainError) -> None:
        show_on_form(self, error)


def _amount_field() -> forms.DecimalField:
    # The model's column: 14 digits, 2 decimals, more than zero (also a named DB constraint).
    return forms.DecimalField(
        min_value=Decimal("0.01"), max_digits=14, decimal_places=2, label="Amount per month"
    )


def _policy_field() -> forms.ChoiceField:
    return forms.ChoiceField(
        choices=OverBudgetPolicy.choices, initial=OverBudgetPolicy.NOTIFY, label="Past 100 %"
    )


class _ProjectChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj: Any) -> str:
        return str(obj)  # "Team / Project", as everywhere


def unit_choices() -> list[tuple[str, str]]:
    """The units, money named by the portal's currency (`PORTAL_CURRENCY`)."""
    labels: dict[str, str] = {
        BudgetUnit.GPU_HOURS: "GPU-hours",
        BudgetUnit.MONEY: settings.PORTAL_CURRENCY,
    }
    return [(value, labels.get(value, label)) for value, label in BudgetUnit.choices]


class BudgetForm(_BootstrapForm):
    """A new budget: for a team (no project) or one of its projects, in one unit."""

    team = forms.ModelChoiceField(queryset=Team.objects.none())
    project = _ProjectChoiceField(
        queryset=Project.objects.none(), required=False, empty_label="The whole team"
    )
    unit = forms.ChoiceField(choices=BudgetUnit.choices)
    amount = _amount_field()
    over_budget_policy = _policy_field()

    def __init__(self, *args: Any, teams: QuerySet[Team], **kwargs: Any) -> None:
        """`teams`: the teams the user manages; only they and their projects can be chosen."""
        super().__init__(*args, **kwargs)
        self.fields["team"].queryset = teams  # type: ignore[attr-defined]
        if len(teams) == 1:  # a lead of one team: nothing to choose, so it is chosen
            self.fields["team"].empty_label = None  # type: ignore[attr-defined]
        self.fields["project"].queryset = (  # type: ignore[attr-defined]
            Project.objects.filter(team__in=teams).select_related("team")
        )
        self.fields["unit"].choices = unit_choices()  # type: ignore[attr-defined]


class BudgetChangeForm(_BootstrapForm):
    """What a budget may change in place: a budget never moves to another team or project."""

    amount = _amount_field()
    over_budget_policy = _policy_field()


class ReportForm(forms.Form):
    """The report page's choices: a month range, one grouping key, and narrowing ids."""

    month_from = forms.DateField(
        required=False,
        input_formats=["%Y-%m"],
        label="From month",
        widget=forms.DateInput(attrs={"type": "month", "class": "form-control"}, format="%Y-%m"),
    )
    month_to = forms.DateField(
        required=False,
        input_formats=["%Y-%m"],
        label="To month",
        widget=forms.DateInput(attrs={"type": "month", "class": "form-control"}, format="%Y-%m"),
    )
    group_by = forms.ChoiceField(
        choices=(),
        required=False,
        label="Group by",
        widget=forms.Select(attrs={"class": "form-select"}),
    )
    team = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)
    project = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)
    pool = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)
    flavor = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)
    cluster = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)
    user = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)

    def __init__(self, data: Any, *, group_choices: Any, max_months: int) -> None:
        super().__init__(data)
        self.fields["group_by"].choices = group_choices  # type: ignore[attr-defined]
        self.max_months = max_months

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        start, end = cleaned.get("month_from"), cleaned.get("month_to")
        if start and end:
            if start > end:
                self.add_error("month_from", "Start at or before the last month.")
            elif (end.year - start.year) * 12 + end.month - start.month + 1 > self.max_months:
                self.add_error("month_from", f"Report on at most {self.max_months} months.")
        return cleaned


FIRST_YEAR, LAST_YEAR = 2000, 9000


class SharingQueryForm(forms.Form):
    """A pool (or every pool) and the days from/to, both included; the last 30 days by default."""

    pool = forms.ModelChoiceField(
        queryset=NodePool.objects.order_by("name"),
        required=False,
        empty_label="Every pool",
        widget=forms.Select(attrs={"class": "form-select"}),
    )

    chosen_period: SharingPeriod

    def __init__(self, data: Any = None) -> None:
        super().__init__(data)
        for name, label in (("from", "From"), ("to", "To")):
            self.fields[name] = forms.DateField(
                required=False,
                label=label,
                input_formats=["%Y-%m-%d"],
                widget=forms.DateInput(attrs={"type": "date", "class": "form-control"}),
            )

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        for name in ("from", "to"):
            day = cleaned.get(name)
            if day is not None and not FIRST_YEAR <= day.year <= LAST_YEAR:
                self.add_error(name, f"Give a day from {FIRST_YEAR} to {LAST_YEAR}.")
        if self.errors:
            return cleaned
        period = sharing_period(first=cleaned.get("from"), last=cleaned.get("to"))
        if period.first > period.last:
            self.add_error("from", "Start on or before the last day.")
        elif (period.last - period.first).days + 1 > MAX_DAYS:
            self.add_error("from", f"Report on at most {MAX_DAYS} days.")
        else:
            self.chosen_period = period
        return cleaned

    def period(self) -> SharingPeriod:
        """The valid form's period, defaults filled in."""
        return self.chosen_period

    def pool_id(self) -> int | None:
        pool = self.cleaned_data.get("pool")
        return pool.pk if pool is not None else None
