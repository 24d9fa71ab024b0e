"""Cost pages and fragments."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from accounting.selectors import estimated_cost_per_hour
from scheduling.models import Flavor
from scheduling.selectors import quota_standing
from tenants.models import Project


def _positive_int(value: str | None, default: int) -> int:
    return int(value) if value and value.isdigit() and int(value) > 0 else default


@login_required
def request_estimate(request: HttpRequest) -> HttpResponse:
    """HTMX: quota left and cost per hour for the request form's current choices."""
    project = (
        Project.objects.visible_to(request.user)
        .filter(pk=_positive_int(request.GET.get("project"), 0))
        .first()
    )
    flavor = (
        Flavor.objects.visible_to(request.user)
        .filter(pk=_positive_int(request.GET.get("flavor"), 0))
        .first()
    )
    gpu_count = _positive_int(request.GET.get("gpu_count"), 1)
    context: dict[str, object] = {"gpu_count": gpu_count, "flavor": flavor}
    if project is not None and flavor is not None:
        context["standing"] = quota_standing(project=project, flavor=flavor)
        context["cost"] = estimated_cost_per_hour(flavor=flavor, gpu_count=gpu_count)
    return render(request, "accounting/_estimate.html", context)
