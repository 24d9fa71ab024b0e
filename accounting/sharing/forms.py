"""The sharing report's query, one form for the page and the API: `pool`, `from`, `to`."""

from __future__ import annotations

from typing import Any

from django import forms

from accounting.sharing.selectors import MAX_DAYS, SharingPeriod, sharing_period
from scheduling.models import NodePool

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
