"""The sharing report's page, and the pilots' figures the fleet page loads (finance, admins)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from accounting.sharing.forms import SharingQueryForm
from accounting.sharing.report import Thresholds
from accounting.sharing.selectors import pool_sharing, require_sharing_reader, sharing_period
from tenants.errors import ForbiddenError


def _require_reader(request: HttpRequest) -> None:
    """To anyone but finance and platform admins the page does not exist."""
    try:
        require_sharing_reader(request.user)
    except ForbiddenError as error:
        raise Http404 from error


@login_required
def sharing_report_page(request: HttpRequest) -> HttpResponse:
    """Per pool and period: what sharing sold, what it cost in slowdown and jitter, the verdict."""
    _require_reader(request)
    form = SharingQueryForm(request.GET)
    if not form.is_valid():
        return render(request, "accounting/sharing.html", {"form": form}, status=400)
    period = form.period()
    context = {
        "form": form,
        "period": period,
        "pools": pool_sharing(period=period, pool_id=form.pool_id()),
        "thresholds": Thresholds(),
    }
    return render(request, "accounting/sharing.html", context)


@login_required
def sharing_pilots_fragment(request: HttpRequest) -> HttpResponse:
    """HTMX, for the fleet page: each pilot pool with its last 30 days' figures and verdict."""
    _require_reader(request)
    period = sharing_period()
    pilots = pool_sharing(period=period, pilots_only=True)
    return render(request, "accounting/_sharing_pilots.html", {"pilots": pilots, "period": period})
