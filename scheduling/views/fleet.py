"""Fleet pages for platform admins: every pool's overview, a pool's nodes, a node's GPUs."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone

from scheduling.models import Node, NodePool
from scheduling.selectors.activity import activity_gaps
from scheduling.selectors.clusters import fleet_by_cluster
from scheduling.selectors.fleet import fleet_overview, node_detail, pool_detail
from scheduling.selectors.fleet_nodes import nodes_needing_attention
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


@login_required
def fleet_pool(request: HttpRequest, slug: str) -> HttpResponse:
    """Platform admins: a pool's nodes, and its allocation and activity over 48 hours."""
    if not scope_of(request.user).is_platform_admin:
        raise Http404
    pool = get_object_or_404(NodePool, slug=slug)
    detail = pool_detail(pool=pool)
    return render(
        request,
        "scheduling/fleet_pool.html",
        {"detail": detail, "chart": detail.series.as_chart(pool.name)},
    )


@login_required
def fleet_node(request: HttpRequest, pk: int) -> HttpResponse:
    """Platform admins: a node's GPUs, who holds each, and the node over 48 hours."""
    if not scope_of(request.user).is_platform_admin:
        raise Http404
    node = get_object_or_404(Node.objects.select_related("pool"), pk=pk)
    detail = node_detail(node=node)
    return render(
        request,
        "scheduling/fleet_node.html",
        {"detail": detail, "chart": detail.series.as_chart(node.name, capacity=len(detail.gpus))},
    )
