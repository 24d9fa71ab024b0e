from __future__ import annotations

import shlex
from datetime import datetime, timedelta
from typing import Any

from django import forms
from django.core.exceptions import NON_FIELD_ERRORS
from django.utils import timezone

from scheduling.choices import Priority, WorkloadKind
from scheduling.models import Cluster, Flavor
from scheduling.services.requests import BLANK_NAME, GpuRequestSpec
from tenants.models import Project


class GpuRequestForm(forms.Form):
    """The web form for a GPU request; the same service as the API validates the rest."""

    name = forms.CharField(
        max_length=80,
        error_messages={"required": BLANK_NAME},
        help_text="A short label for lists, e.g. resnet sweep 3",
    )
    project = forms.ModelChoiceField(queryset=Project.objects.none())
    flavor = forms.ModelChoiceField(
        queryset=Flavor.objects.none(),
        help_text="A share (vGPU or MIG) counts in GPU-equivalents, GPU-eq: the part of one "
        "whole card it is worth.",
    )
    cluster = forms.ModelChoiceField(
        queryset=Cluster.objects.filter(is_active=True),
        required=False,
        empty_label="Any that fits",
        help_text="Run only there; it must hold one of the flavor's pools",
    )
    gpu_count = forms.IntegerField(min_value=1, max_value=1024, initial=1, label="GPUs")
    kind = forms.ChoiceField(choices=WorkloadKind.choices, initial=WorkloadKind.JOB)
    image = forms.CharField(max_length=255, initial="pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime")
    command = forms.CharField(
        required=False, help_text="As you would type it in a shell, e.g. python train.py --epochs 3"
    )
    env = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 2}), help_text="KEY=value per line"
    )
    max_runtime_hours = forms.DecimalField(
        min_value=0.1, max_value=2160, decimal_places=2, initial=2, label="Max runtime (hours)"
    )
    priority = forms.ChoiceField(choices=Priority.choices, initial=Priority.NORMAL)
    is_preemptible = forms.BooleanField(required=False, label="Preemptible")
    allow_shared_node = forms.BooleanField(required=False, initial=True, label="May share a node")
    gpu_memory_mib = forms.IntegerField(
        required=False, min_value=1, label="vGPU memory (MiB)", help_text="vGPU flavors only"
    )
    gpu_cores_percent = forms.IntegerField(
        required=False, min_value=1, max_value=100, label="vGPU cores (%)"
    )
    cpu_millicores = forms.IntegerField(
        required=False, min_value=1, label="CPU (millicores)", help_text="Empty: the flavor's"
    )
    memory_mib = forms.IntegerField(
        required=False, min_value=1, label="Memory (MiB)", help_text="Empty: the flavor's"
    )
    shm_mib = forms.IntegerField(
        required=False, min_value=1, label="/dev/shm (MiB)", help_text="Counted in memory"
    )
    home_volume = forms.BooleanField(
        required=False, label="Home volume", help_text="Notebooks: yours, at /home/jovyan"
    )
    secret_env = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        label="Env from project secrets",
        help_text="NAME=secret/key per line, e.g. HF_TOKEN=hf/token",
    )
    reason = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))

    def __init__(self, *args: Any, projects: Any, flavors: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["project"].queryset = projects  # type: ignore[attr-defined]
        self.fields["flavor"].queryset = flavors  # type: ignore[attr-defined]
        for name, field in self.fields.items():
            widget = field.widget
            if isinstance(widget, forms.CheckboxInput):
                widget.attrs["class"] = "form-check-input"
            else:
                css = "form-select" if isinstance(widget, forms.Select) else "form-control"
                invalid = " is-invalid" if self.is_bound and name in self.errors else ""
                widget.attrs["class"] = css + invalid

    def clean_command(self) -> list[str]:
        try:
            return shlex.split(self.cleaned_data["command"] or "")
        except ValueError as error:
            raise forms.ValidationError(f"Cannot split the command: {error}.") from error

    def clean_env(self) -> dict[str, str]:
        env: dict[str, str] = {}
        for line in (self.cleaned_data["env"] or "").splitlines():
            if not line.strip():
                continue
            name, sep, value = line.partition("=")
            if not sep:
                raise forms.ValidationError(f"'{line}' is not KEY=value.")
            env[name.strip()] = value
        return env

    def clean_secret_env(self) -> list[dict[str, str]]:
        refs: list[dict[str, str]] = []
        for line in (self.cleaned_data["secret_env"] or "").splitlines():
            if not line.strip():
                continue
            name, sep, source = line.partition("=")
            secret, slash, key = source.strip().partition("/")
            if not (sep and slash and name.strip() and secret and key):
                raise forms.ValidationError(f"'{line}' is not NAME=secret/key.")
            refs.append({"name": name.strip(), "secret": secret, "key": key})
        return refs

    def spec(self) -> GpuRequestSpec:
        """The request the form asks for, for the submit service to check."""
        data = dict(self.cleaned_data)
        data["max_runtime_seconds"] = int(data.pop("max_runtime_hours") * 3600)
        return GpuRequestSpec(**data)


def initial_from_body(body: dict[str, Any]) -> dict[str, Any]:
    """The form's initial values for a request body (a template's, or a request to clone)."""
    initial = {key: value for key, value in body.items() if value is not None}
    if "command" in initial:
        initial["command"] = shlex.join(initial["command"])
    if "env" in initial:
        initial["env"] = "\n".join(f"{key}={value}" for key, value in initial["env"].items())
    if "secret_env" in initial:
        initial["secret_env"] = "\n".join(
            f"{ref['name']}={ref['secret']}/{ref['key']}" for ref in initial["secret_env"]
        )
    seconds = initial.pop("max_runtime_seconds", None)
    if seconds:
        initial["max_runtime_hours"] = round(seconds / 3600, 2)
    return initial


class DecisionForm(forms.Form):
    comment = forms.CharField(required=False, max_length=2000)


class ProjectQuotaForm(forms.Form):
    guaranteed = forms.IntegerField(min_value=0, max_value=100_000)
    limit = forms.IntegerField(min_value=0, max_value=100_000)


RANGE_PRESETS = {
    "6h": ("Last 6 hours", timedelta(hours=6)),
    "24h": ("Last 24 hours", timedelta(hours=24)),
    "48h": ("Last 48 hours", timedelta(hours=48)),
    "7d": ("Last 7 days", timedelta(days=7)),
    "30d": ("Last 30 days", timedelta(days=30)),
}
WHOLE_LIFE = "life"
CUSTOM_RANGE = "custom"
LONGEST_CUSTOM_RANGE = timedelta(days=90)
DATETIME_INPUTS = ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d"]


class TimeRangeForm(forms.Form):
    """The time range of a page's charts, from the query string so that it works without
    script and a range is a link: a preset (the last 6 hours to 30 days), the whole life of a
    request where the page offers it, or a custom from/to of up to 90 days."""

    range = forms.ChoiceField(required=False, label="Time range")
    start = forms.DateTimeField(
        required=False,
        label="From",
        input_formats=DATETIME_INPUTS,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
    )
    end = forms.DateTimeField(
        required=False,
        label="To",
        input_formats=DATETIME_INPUTS,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
    )

    def __init__(self, data: Any, *, default: str, whole_life: bool = False) -> None:
        super().__init__(data if any(k in data for k in ("range", "start", "end")) else None)
        choices = [(WHOLE_LIFE, "Whole life")] if whole_life else []
        choices += [(key, label) for key, (label, _) in RANGE_PRESETS.items()]
        choices.append((CUSTOM_RANGE, "Custom from/to"))
        field = self.fields["range"]
        assert isinstance(field, forms.ChoiceField)
        field.choices = choices
        field.initial = default
        self.default = default

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        start, end = cleaned.get("start"), cleaned.get("end")
        chosen = cleaned.get("range") or (CUSTOM_RANGE if start or end else self.default)
        cleaned["range"] = chosen
        if chosen != CUSTOM_RANGE or self.errors:
            return cleaned
        if start is None or end is None:
            raise forms.ValidationError("A custom range needs both a From and a To.")
        if start >= end:
            raise forms.ValidationError("From must be before To.")
        if end - start > LONGEST_CUSTOM_RANGE:
            raise forms.ValidationError("A custom range is at most 90 days long.")
        if start > timezone.now():
            raise forms.ValidationError("From is in the future: there is no activity yet.")
        return cleaned

    def error_fields(self) -> dict[str, list[str]]:
        """The form's errors by field, for the API's 400 (`non_field_errors`: the range's)."""
        return {
            "non_field_errors" if name == NON_FIELD_ERRORS else name: [str(m) for m in messages]
            for name, messages in self.errors.items()
        }

    @property
    def chosen(self) -> str:
        """The range the page shows: the valid one asked for, else the page's default."""
        if self.is_bound and self.is_valid():
            return str(self.cleaned_data["range"])
        return self.default

    def bounds(
        self, *, now: datetime, life: tuple[datetime, datetime] | None = None
    ) -> tuple[datetime, datetime] | None:
        """The (start, end) to chart; None for a whole life that has not begun."""
        chosen = self.chosen
        if chosen == WHOLE_LIFE:
            return life
        if chosen == CUSTOM_RANGE:
            return self.cleaned_data["start"], min(self.cleaned_data["end"], now)
        return now - RANGE_PRESETS[chosen][1], now
