"""The report pages' reads: a usage or chargeback report for a month range, grouped by one key,
with drill-down links that keep the reader in the portal (selectors behind the same API)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from typing import Any
from urllib.parse import urlencode

from django.contrib.auth import get_user_model
from django.urls import reverse

from accounting.selectors.idle_sharing import IdleSharing
from accounting.selectors.usage import (
    ALL,
    OWN,
    UsageQuery,
    chargeback,
    check_filters,
    current_month,
    report_reach,
    totals,
    usage_rows,
)
from scheduling.models import Cluster, Flavor, GpuRequest, NodePool
from tenants.models import Project, Team, scope_of

GROUP_CHOICES = (
    ("team", "Team"),
    ("project", "Project"),
    ("user", "User"),
    ("request", "Request"),
    ("cluster", "Cluster"),
    ("pool", "Pool"),
    ("flavor", "Flavor"),
)
# Clicking a row narrows the report to it and groups one level down.
DRILL_DOWN = {
    "team": "project",
    "project": "user",
    "user": "request",
    "cluster": "pool",
    "pool": "flavor",
    "flavor": "project",
}
FILTER_MODELS: dict[str, Any] = {
    "team": Team,
    "project": Project,
    "cluster": Cluster,
    "pool": NodePool,
    "flavor": Flavor,
    "user": get_user_model(),
}
MAX_MONTHS = 36


def months_back(month: date, count: int) -> date:
    for _ in range(count):
        month = (
            date(month.year - 1, 12, 1)
            if month.month == 1
            else month.replace(month=month.month - 1)
        )
    return month


def month_span(month_from: date, month_to: date) -> int:
    return (month_to.year - month_from.year) * 12 + month_to.month - month_from.month + 1


@dataclass(frozen=True, slots=True)
class ReportFilter:
    key: str
    label: str
    name: str
    remove_url: str


@dataclass
class Report:
    """A report page: its rows (each with a drill-down link where one exists), totals, the
    fleet's idle capacity (finance and admins, unfiltered), filters and export links."""

    query: UsageQuery
    group_by: str
    rows: list[dict[str, Any]]
    totals: dict[str, Decimal]
    idle: list[dict[str, Any]] | None
    fleet: dict[str, Decimal] | None
    filters: list[ReportFilter] = field(default_factory=list)
    idle_sharing: IdleSharing | None = None
    rows_share_idle: bool = False
    whose: str = ""
    is_own: bool = False
    export_csv: str = ""
    export_xlsx: str = ""


def _params(query: UsageQuery, group_by: str, **changes: Any) -> dict[str, Any]:
    params: dict[str, Any] = {
        "month_from": f"{query.month_from:%Y-%m}",
        "month_to": f"{query.month_to:%Y-%m}",
        "group_by": group_by,
        "team": query.team_id,
        "project": query.project_id,
        "pool": query.pool_id,
        "flavor": query.flavor_id,
        "cluster": query.cluster_id,
        "user": query.user_id,
    }
    params.update(changes)
    return {key: value for key, value in params.items() if value not in (None, "")}


def build_report(
    *, user: Any, query: UsageQuery, group_by: str, page_url: str, api_url: str
) -> Report:
    """Rows, totals and links of one report page; ids out of the reader's reach are a
    DomainError (400), as in the API."""
    check_filters(user=user, query=query)
    scope = scope_of(user)
    reach = report_reach(scope)
    if reach == OWN:
        rows = usage_rows(user=user, query=query)
        idle = fleet = sharing = None
        sums = totals(rows)
    else:
        report = chargeback(user=user, query=query)
        rows, sums, idle, fleet = report.rows, report.totals, report.idle, report.fleet
        sharing = report.idle_sharing
    below = DRILL_DOWN.get(group_by)
    if group_by == "request":
        _link_requests(rows, user=user)
    for row in rows:
        row["drill_url"] = (
            f"{page_url}?{urlencode(_params(query, below, **{group_by: row[f'{group_by}_id']}))}"
            if below and row.get(f"{group_by}_id") is not None
            else ""
        )
    filters = []
    for key, model in FILTER_MODELS.items():
        chosen = getattr(query, f"{key}_id")
        if chosen is None:
            continue
        found = model.objects.filter(pk=chosen).first()
        filters.append(
            ReportFilter(
                key=key,
                label=dict(GROUP_CHOICES)[key],
                name=str(getattr(found, "username" if key == "user" else "name", chosen)),
                remove_url=f"{page_url}?{urlencode(_params(query, group_by, **{key: None}))}",
            )
        )
    api = {
        "month": f"{query.month_to:%Y-%m}",
        "months": month_span(query.month_from, query.month_to),
        "group_by": group_by,
        **{k: v for k, v in _params(query, group_by).items() if k in FILTER_MODELS},
    }
    return Report(
        query=query,
        group_by=group_by,
        rows=rows,
        totals=sums,
        idle=idle,
        fleet=fleet,
        filters=filters,
        whose=_whose(reach=reach, scope=scope, query=query),
        idle_sharing=sharing,
        rows_share_idle=any("idle_share" in row for row in rows),
        is_own=reach == OWN,
        export_csv=f"{api_url}?{urlencode({**api, 'export': 'csv'})}",
        export_xlsx=f"{api_url}?{urlencode({**api, 'export': 'xlsx'})}",
    )


def _link_requests(rows: list[dict[str, Any]], *, user: Any) -> None:
    """A request row links to the request's page when the reader may open it (its owner, the
    team's lead, an admin; finance reads the cost, not the request)."""
    ids = {row["request_id"] for row in rows if row.get("request_id") is not None}
    visible = set(
        GpuRequest.objects.visible_to(user).filter(pk__in=ids).values_list("pk", flat=True)
    )
    for row in rows:
        row["request_url"] = (
            reverse("gpu-request-page", args=[row["request_id"]])
            if row.get("request_id") in visible
            else ""
        )


def _whose(*, reach: str, scope: Any, query: UsageQuery) -> str:
    """Whose usage the figures sum, in words: a developer's report holds their own requests
    only, never the team's total."""
    if reach == OWN:
        return "Your requests"
    if query.project_id is not None:
        project = Project.objects.filter(pk=query.project_id).select_related("team").first()
        if project is not None:
            return f"Project {project.name} of {project.team.name}"
    team_ids = [query.team_id] if query.team_id is not None else None
    if team_ids is None and reach != ALL:
        team_ids = sorted(scope.lead_team_ids)
    if team_ids is None:
        return "All teams"
    teams = Team.objects.filter(pk__in=team_ids).order_by("name")
    names = list(teams.values_list("name", flat=True))
    return ("Team " if len(names) == 1 else "Teams ") + ", ".join(names)


def default_range() -> tuple[date, date]:
    """This billing month back to the first of three months ago: a quarter."""
    month = current_month()
    return months_back(month, 2), month
