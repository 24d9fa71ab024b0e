"""Cost pages and fragments."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from accounting.efficiency import request_efficiency
from accounting.selectors import estimated_cost_per_hour
from scheduling.models import Flavor, GpuRequest
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


@login_required
def request_efficiency_fragment(request: HttpRequest, pk: int) -> HttpResponse:
    """HTMX: the request detail page's efficiency card (same selector as the API)."""
    gpu_request = get_object_or_404(
        GpuRequest.objects.visible_to(request.user).select_related("flavor"), pk=pk
    )
    context = {"efficiency": request_efficiency(gpu_request)}
    return render(request, "accounting/_efficiency.html", context)
