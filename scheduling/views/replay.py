"""The policy replay page: platform admins replay the last days under a changed policy.

The replay runs inside the request, and only for windows the page can replay while the admin
waits (`policy_replay.too_large_for_page`: up to 200 nodes and 2,000 submissions, about 5 seconds
of CPU at the benchmark's rate); a larger fleet is pointed to `manage.py replay`, which has no
request timeout. Nothing is written, so a page reload is the retry. Other users get 403.
"""

from __future__ import annotations

from django import forms
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from scheduling.services.policy_replay import (
    PolicyFileError,
    compare_policies,
    comparison_rows,
    load_policy_change,
    recorded_trace,
    too_large_for_page,
)
from tenants.models import scope_of

POLICY_EXAMPLE = """team_weights: {ml-research: 2.0}
quotas:
  - {team: ml-research, flavor: a100-80g, guaranteed: 8, limit: 16}
short_reserve: {a100-training: 0.1}
scoring: {a100-training: spread}
preemption: false"""


class ReplayForm(forms.Form):
    days = forms.FloatField(min_value=0.1, max_value=14, initial=7, label="Days to replay")
    policy = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 7, "spellcheck": "false"}),
        label="Policy changes (YAML or JSON)",
        help_text="Empty: replay the current policy only.",
    )


@login_required
@require_http_methods(["GET", "POST"])
def policy_replay(request: HttpRequest) -> HttpResponse:
    """Platform admins: the replay form, and the comparison once it ran."""
    if not scope_of(request.user).is_platform_admin:
        raise Http404
    form = ReplayForm(request.POST or None)
    context: dict[str, object] = {"form": form, "example": POLICY_EXAMPLE}
    if request.method == "POST" and form.is_valid():
        trace = recorded_trace(days=form.cleaned_data["days"], now=timezone.now())
        try:
            change = load_policy_change(form.cleaned_data["policy"], fleet=trace.fleet)
        except PolicyFileError as exc:
            form.add_error("policy", str(exc))
            change = None
        too_large = too_large_for_page(trace)
        if too_large:
            form.add_error(None, too_large)
        elif change is not None:
            comparison = compare_policies(trace=trace, change=change)
            context["comparison"] = comparison
            context["rows"] = comparison_rows(comparison)
    status = 400 if request.method == "POST" and not form.is_valid() else 200
    return render(request, "scheduling/policy_replay.html", context, status=status)
