"""The MIG layout planner page under /manage/: platform admins only (others get 404)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from scheduling.models import NodePool
from scheduling.selectors.mig_plan import DEMAND_WINDOW, mig_plan
from tenants.models import scope_of


def _layout(cards: tuple[dict[str, int], ...]) -> str:
    """Cards' layouts in words: `2 x (7 x 1g.10gb)`, identical cards counted once."""
    if not cards:
        return "no cards"
    groups: dict[str, int] = {}
    for card in cards:
        text = " + ".join(f"{n} x {p}" for p, n in sorted(card.items())) or "no instances"
        groups[text] = groups.get(text, 0) + 1
    return ", ".join(f"{n} x ({text})" for text, n in groups.items())


@login_required
def mig_plan_page(request: HttpRequest) -> HttpResponse:
    """The suggested mig.config per MIG node, with the demand it serves."""
    if not scope_of(request.user).is_platform_admin:
        raise Http404
    plan = mig_plan(now=timezone.now())
    pool_names = dict(NodePool.objects.values_list("slug", "name"))
    rows = [
        {
            "suggestion": s,
            "pool": pool_names.get(s.pool, s.pool),
            "current": _layout(s.current_cards),
            "suggested": _layout(s.cards),
            "serves": ", ".join(f"{n} x {p}" for p, n in s.serves.items()) or "nothing waiting",
        }
        for s in plan.nodes
    ]
    context = {
        "rows": rows,
        "demand": [
            (pool_names.get(pool, pool), profile, n)
            for (pool, profile), n in sorted(plan.demand.items())
        ],
        "unserved": [
            (pool_names.get(pool, pool), profile, n)
            for (pool, profile), n in sorted(plan.unserved.items())
        ],
        "window_hours": int(DEMAND_WINDOW.total_seconds() // 3600),
    }
    return render(request, "scheduling/mig_plan.html", context)
