"""Numbers for the role home pages, from the same selectors as the API."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db.models import Count, Sum
from django.utils import timezone

from accounting.choices import BudgetUnit
from accounting.models import Budget, DailyUsage
from accounting.periods import billing_zone, month_bounds, next_month
from accounting.selectors.budgets import spent_of, with_burn
from accounting.selectors.efficiency import efficiency_rows
from accounting.selectors.idle_sharing import RULE_LABELS
from accounting.selectors.usage import (
    UsageQuery,
    chargeback,
    current_month,
    sharing_rule,
    totals,
    usage_rows,
)
from scheduling.choices import COMMITTED_STATUSES, RequestStatus
from scheduling.models import Allocation, GpuDevice, GpuRequest, NodePool, Quota
from scheduling.selectors.approvals import approval_inbox, open_asks
from scheduling.selectors.queue import fill_queue_positions
from scheduling.selectors.quotas import QuotaUsage, flavor_unit, quota_usage
from tenants.models import AuditEvent, scope_of


def _month(months: int = 1, **filters: Any) -> UsageQuery:
    to = current_month()
    start = to
    for _ in range(months - 1):
        start = (
            start.replace(year=start.year - 1, month=12)
            if start.month == 1
            else start.replace(month=start.month - 1)
        )
    return UsageQuery(month_from=start, month_to=to, **filters)


def _chart(kind: str, labels: list[str], datasets: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": kind, "labels": labels, "datasets": datasets}


def developer(user: Any) -> dict[str, Any]:
    live = list(
        GpuRequest.objects.visible_to(user)
        .filter(owner=user, status__in=COMMITTED_STATUSES)
        .select_related("project", "flavor")
        .order_by("created_at")
    )
    fill_queue_positions(live)
    # Queued by their place in the queue (Kueue's for the work it holds), the rest after.
    live.sort(key=lambda r: (r.queue_position is None, r.queue_position or 0))
    awaiting_approval = list(
        GpuRequest.objects.visible_to(user)
        .filter(owner=user, status=RequestStatus.PENDING_APPROVAL)
        .select_related("project", "flavor")
        .order_by("created_at")
    )
    rows = usage_rows(user=user, query=_month(group_by=("project",)))
    chart = _chart(
        "bar",
        [r["project"] for r in rows],
        [
            {
                "label": f"Cost this month ({settings.PORTAL_CURRENCY})",
                "data": [float(r["cost"]) for r in rows],
            }
        ],
    )
    recent = efficiency_rows(user=user, group_by="request", days=14)[-10:]
    efficiency_chart = _chart(
        "bar",
        [r["request"] for r in recent],
        [
            {"label": "Active GPU-hours", "data": [float(r["active_gpu_hours"]) for r in recent]},
            {"label": "Waste GPU-hours", "data": [float(r["waste_gpu_hours"]) for r in recent]},
        ],
    )
    return {
        "live_requests": live,
        "awaiting_approval": awaiting_approval,
        "usage": rows,
        "usage_totals": totals(rows),
        "chart": chart,
        "efficiency": recent,
        "efficiency_chart": efficiency_chart,
    }


def team_lead(user: Any) -> dict[str, Any]:
    scope = scope_of(user)
    quotas = Quota.objects.filter(team_id__in=scope.lead_team_ids, project__isnull=True)
    usage = quota_usage(set(scope.lead_team_ids))
    none = QuotaUsage()
    quota_rows = []
    for q in quotas.select_related("team", "flavor").order_by("team__name", "flavor__name"):
        counted = usage.get((q.team_id, None, q.flavor_id), none)
        quota_rows.append(
            {
                "team": q.team.name,
                "flavor": q.flavor.name,
                "guaranteed": q.guaranteed,
                "limit": q.limit,
                "used": counted.used,
                "queued": counted.queued,
                "borrowed": counted.borrowed,
                "unit": flavor_unit(q.flavor),
            }
        )
    members = usage_rows(user=user, query=_month(group_by=("user",)))
    chart = _chart(
        "bar",
        [f"{q['team']} · {q['flavor']}" for q in quota_rows],
        [
            {"label": "Used", "data": [q["used"] for q in quota_rows]},
            {"label": "Queued", "data": [q["queued"] for q in quota_rows]},
            {"label": "Borrowed", "data": [q["borrowed"] for q in quota_rows]},
            {"label": "Guaranteed", "data": [q["guaranteed"] for q in quota_rows]},
            {"label": "Limit", "data": [q["limit"] for q in quota_rows]},
        ],
    )
    waste = efficiency_rows(user=user, group_by="project", days=14)
    budgets = list(
        with_burn(Budget.objects.filter(team_id__in=scope.lead_team_ids).select_related("team"))
    )
    return {
        "quota_rows": quota_rows,
        "pending_approvals": approval_inbox(user=user).count(),
        "open_asks": len(open_asks(user=user)),
        "member_usage": members,
        "usage_totals": totals(members),
        "chart": chart,
        "idle_waste": waste,
        "idle_waste_total": sum((r["waste_gpu_hours"] for r in waste), Decimal(0)),
        "budgets": [
            {"budget": b, "spent": spent_of(b), "percent": spent_of(b) * 100 / b.amount}
            for b in budgets
        ],
        "burndown_chart": burndown_chart(budgets),
    }


def burndown_chart(budgets: list[Budget]) -> dict[str, Any]:
    """Per budget, what is left each day of this billing month (from the daily rollup)."""
    month = current_month()
    zone = billing_zone()
    days: list[Any] = []
    day = month
    while day < next_month(month):
        days.append(day)
        day += timedelta(days=1)
    today = timezone.now().astimezone(zone).date()
    datasets = []
    for budget in budgets:
        rows = DailyUsage.objects.filter(team_id=budget.team_id, day__gte=month, day__lte=today)
        if budget.project_id:
            rows = rows.filter(project_id=budget.project_id)
        column = "gpu_hours" if budget.unit == BudgetUnit.GPU_HOURS else "cost"
        per_day = dict(rows.values("day").annotate(v=Sum(column)).values_list("day", "v"))
        left: Decimal = budget.amount
        data: list[float | None] = []
        for day in days:
            if day > today:
                data.append(None)
                continue
            left -= per_day.get(day) or Decimal(0)
            data.append(float(left))
        owner = budget.project.name if budget.project_id and budget.project else budget.team.name
        datasets.append({"label": f"{owner} ({budget.get_unit_display()}) left", "data": data})
    return _chart("line", [f"{d:%d}" for d in days], datasets)


def platform_admin(user: Any) -> dict[str, Any]:
    capacity = dict(
        GpuDevice.objects.values("node__pool_id")
        .annotate(n=Count("pk"))
        .values_list("node__pool_id", "n")
    )
    allocated = dict(
        Allocation.objects.filter(ended_at__isnull=True)
        .values("pool_id")
        .annotate(g=Sum("request__gpu_equivalent"))
        .values_list("pool_id", "g")
    )
    queued = dict(
        GpuRequest.objects.filter(status=RequestStatus.QUEUED)
        .values("flavor__pool_id")
        .annotate(n=Count("pk"))
        .values_list("flavor__pool_id", "n")
    )
    pools = [
        {
            "pool": p.name,
            "capacity": capacity.get(p.pk, 0),
            "allocated": float(allocated.get(p.pk) or 0),
            "queued": queued.get(p.pk, 0),
        }
        for p in NodePool.objects.order_by("name")
    ]
    top = sorted(
        usage_rows(user=user, query=_month(group_by=("team", "project"))),
        key=lambda r: r["cost"],
        reverse=True,
    )[:5]
    chart = _chart(
        "bar",
        [p["pool"] for p in pools],
        [
            {"label": "Allocated GPUs", "data": [p["allocated"] for p in pools]},
            {"label": "Capacity GPUs", "data": [p["capacity"] for p in pools]},
        ],
    )
    start, _ = month_bounds(current_month(), billing_zone())
    reclaims = list(
        AuditEvent.objects.filter(action__startswith="reclaim.", occurred_at__gte=start)
        .exclude(action__endswith="_warning")
        .values("action")
        .annotate(n=Count("pk"))
        .order_by("-n", "action")
    )
    reclaim_rows = [{"reason": r["action"].split(".", 1)[1], "count": r["n"]} for r in reclaims]
    reclaim_chart = _chart(
        "bar",
        [r["reason"] for r in reclaim_rows],
        [{"label": "Reclamations this month", "data": [r["count"] for r in reclaim_rows]}],
    )
    return {
        "pools": pools,
        "queue_depth": sum(queued.values()),
        "top_consumers": top,
        "chart": chart,
        "reclaims": reclaim_rows,
        "reclaim_chart": reclaim_chart,
    }


def finance(user: Any) -> dict[str, Any]:
    report = chargeback(
        user=user, query=_month(months=6, group_by=("month", "team")), share_idle_back=False
    )
    months = sorted({r["month"] for r in report.rows})
    teams = sorted({r["team"] for r in report.rows})
    cost = {(r["month"], r["team"]): float(r["cost"]) for r in report.rows}
    chart = _chart(
        "bar",
        months,
        [
            {"label": team, "data": [cost.get((m, team), 0) for m in months], "stack": "cost"}
            for team in teams
        ],
    )
    now = timezone.now()
    # The home table is the month's usage; the idle shares are on the report grouped by team.
    this_month = chargeback(
        user=user, query=_month(group_by=("team", "project")), now=now, share_idle_back=False
    )
    # "Fleet cost" is one thing everywhere: what the teams ran plus the idle capacity, as in
    # the figure above the chart, whose value is the chart's last point.
    fleet_by_month = fleet_costs(user=user, months=6, now=now)
    trend = _chart(
        "line",
        [label for label, _ in fleet_by_month],
        [
            {
                "label": f"Fleet cost: teams + idle capacity ({settings.PORTAL_CURRENCY})",
                "data": [float(cost) for _, cost in fleet_by_month],
            }
        ],
    )
    return {
        "trend_chart": trend,
        "by_month": report,
        "this_month": this_month,
        "chart": chart,
        "currency": settings.PORTAL_CURRENCY,
        "idle_rule_label": RULE_LABELS.get(sharing_rule(), ""),
    }


def fleet_costs(*, user: Any, months: int, now: Any = None) -> list[tuple[str, Decimal]]:
    """The fleet cost (allocated plus idle capacity) of each of the last `months` months."""
    last = _month(months=months)
    out = []
    for month in last.months:
        query = UsageQuery(month_from=month, month_to=month)
        report = chargeback(user=user, query=query, now=now, share_idle_back=False)
        fleet = report.fleet or {}
        out.append((f"{month:%Y-%m}", fleet.get("fleet_cost", report.totals["cost"])))
    return out


BUILDERS = {
    "developer": developer,
    "team_lead": team_lead,
    "platform_admin": platform_admin,
    "finance": finance,
}


def dashboard_context(*, user: Any, role: str | None) -> dict[str, Any]:
    builder = BUILDERS.get(role or "")
    return {"dashboard": builder(user)} if builder else {}
