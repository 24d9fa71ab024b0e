"""Fleet pages for platform admins: every pool's overview, a pool's nodes, a node's GPUs."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone

from scheduling.forms import TimeRangeForm
from scheduling.models import Node, NodePool
from scheduling.selectors.activity import activity_gaps
from scheduling.selectors.clusters import fleet_by_cluster
from scheduling.selectors.fleet import (
    DEFAULT_RANGE,
    fleet_overview,
    fleet_window,
    node_detail,
    pool_detail,
)
from scheduling.selectors.fleet_nodes import nodes_needing_attention
from scheduling.selectors.timeline import Window
from scheduling.services.kueue_drift import kueue_checks
from tenants.models import scope_of


@login_required
def fleet(request: HttpRequest) -> HttpResponse:
    """Platform admins: allocated vs capacity, activity, stranded capacity and waits per pool."""
    if not scope_of(request.user).is_platform_admin:
        raise Http404
    pools = fleet_overview()
    return render(
        request,
        "scheduling/fleet.html",
        {
            "pools": pools,
            "clusters": fleet_by_cluster(pools),
            "node_notes": nodes_needing_attention(),
            "kueue_checks": kueue_checks(),
            "activity_gaps": activity_gaps(now=timezone.now()),
        },
    )


def chart_range(request: HttpRequest) -> tuple[TimeRangeForm, Window]:
    """The range asked for in the query string (`range`, or `start` and `end`), else the last
    48 hours; a bad one leaves the default and its message on the form."""
    form = TimeRangeForm(request.GET, default="48h")
    now = timezone.now()
    bounds = form.bounds(now=now) or (now - DEFAULT_RANGE, now)
    return form, fleet_window(start=bounds[0], end=bounds[1])


@login_required
def fleet_pool(request: HttpRequest, slug: str) -> HttpResponse:
    """Platform admins: a pool's nodes, and its allocation and activity over a time range."""
    if not scope_of(request.user).is_platform_admin:
        raise Http404
    pool = get_object_or_404(NodePool, slug=slug)
    form, window = chart_range(request)
    detail = pool_detail(pool=pool, window=window)
    capacity = sum(row.gpus for row in detail.nodes)
    return render(
        request,
        "scheduling/fleet_pool.html",
        {
            "detail": detail,
            "chart": detail.series.as_chart(pool.name, capacity=capacity),
            "range_form": form,
            "window": window,
        },
        status=400 if form.errors else 200,
    )


@login_required
def fleet_node(request: HttpRequest, pk: int) -> HttpResponse:
    """Platform admins: a node's GPUs, who holds each, and the node over a time range."""
    if not scope_of(request.user).is_platform_admin:
        raise Http404
    node = get_object_or_404(Node.objects.select_related("pool"), pk=pk)
    form, window = chart_range(request)
    detail = node_detail(node=node, window=window)
    return render(
        request,
        "scheduling/fleet_node.html",
        {
            "detail": detail,
            "chart": detail.series.as_chart(node.name, capacity=len(detail.gpus)),
            "range_form": form,
            "window": window,
        },
        status=400 if form.errors else 200,
    )
