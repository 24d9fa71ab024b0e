"""The MIG layout planner's reads: the MIG demand of the last day and the MIG nodes as they are.

`mig_plan` feeds them to the pure planner (`scheduling.engine.mig.plan_mig_layouts`), which
suggests a `nvidia.com/mig.config` per node. Nothing is written: applying a config (labelling
the node, adding a custom config to the MIG manager's ConfigMap) is the cluster operator's step.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from django.db.models import Q

from scheduling.choices import FlavorKind, RequestStatus, SharingMode
from scheduling.engine.mig import MIG_CONFIG_LABEL, MigPlan, PlanNode, plan_mig_layouts
from scheduling.models import GpuDevice, GpuRequest, Node

#: How far back the planner counts MIG requests (older ones count while they still wait).
DEMAND_WINDOW = timedelta(days=1)
WAITING = (RequestStatus.PENDING_APPROVAL, RequestStatus.APPROVED, RequestStatus.QUEUED)


def mig_demand(*, now: datetime) -> dict[tuple[str, str], int]:
    """Instances wanted per (pool slug, MIG profile): every MIG request of the last day, and
    older ones still waiting; rejected ones do not count."""
    rows = (
        GpuRequest.objects.filter(flavor__kind=FlavorKind.MIG)
        .filter(Q(created_at__gte=now - DEMAND_WINDOW) | Q(status__in=WAITING))
        .exclude(status=RequestStatus.REJECTED)
        .values_list("flavor__pool__slug", "flavor__mig_profile", "gpu_count")
    )
    demand: dict[tuple[str, str], int] = defaultdict(int)
    for pool, profile, count in rows:
        demand[(pool, profile)] += count
    return dict(sorted(demand.items()))


def mig_plan_nodes() -> list[PlanNode]:
    """The nodes of MIG pools with their cards' current layouts and mig.config label."""
    cards: dict[int, list[dict[str, int]]] = defaultdict(list)
    devices = GpuDevice.objects.filter(node__pool__sharing_mode=SharingMode.MIG).order_by(
        "node_id", "index"
    )
    for node_id, layout in devices.values_list("node_id", "mig_layout"):
        cards[node_id].append({str(p): int(n) for p, n in (layout or {}).items()})
    nodes = Node.objects.filter(pool__sharing_mode=SharingMode.MIG).order_by("name")
    return [
        PlanNode(
            name=name,
            pool=pool,
            gpu_model=model,
            cards=tuple(cards.get(pk, [])),
            config=str((labels or {}).get(MIG_CONFIG_LABEL, "")),
        )
        for pk, name, pool, model, labels in nodes.values_list(
            "pk", "name", "pool__slug", "gpu_model", "labels"
        )
    ]


def mig_plan(*, now: datetime) -> MigPlan:
    """The suggested MIG layouts for the demand of the day before `now`."""
    return plan_mig_layouts(mig_plan_nodes(), mig_demand(now=now))


def mig_plan_body(plan: MigPlan) -> dict[str, object]:
    """The plan as JSON: per node the current and suggested config and cards, what it would
    serve; the demand and what no node can serve, per pool and profile."""

    def pairs(counts: dict[tuple[str, str], int]) -> list[dict[str, object]]:
        return [{"pool": p, "profile": m, "instances": n} for (p, m), n in sorted(counts.items())]

    return {
        "window_hours": DEMAND_WINDOW.total_seconds() / 3600,
        "demand": pairs(plan.demand),
        "unserved": pairs(plan.unserved),
        "nodes": [
            {
                "node": s.node,
                "pool": s.pool,
                "gpu_model": s.gpu_model,
                "current_config": s.current_config,
                "current_cards": list(s.current_cards),
                "suggested_config": s.config,
                "suggested_cards": list(s.cards),
                "changes": s.changes,
                "serves": s.serves,
            }
            for s in plan.nodes
        ],
    }
