"""Cost pages and fragments: the request form's estimate, efficiency, the budgets page, the
sharing report."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from accounting.forms import (
    BudgetChangeForm,
    BudgetForm,
    ReportForm,
    SharingQueryForm,
    unit_choices,
)
from accounting.models import Budget, Statement
from accounting.selectors.budgets import (
    Forecast,
    forecast_of,
    percent_used,
    spent_of,
    with_burn,
)
from accounting.selectors.efficiency import request_efficiency
from accounting.selectors.inbox import lead_inbox
from accounting.selectors.reports import GROUP_CHOICES, MAX_MONTHS, build_report, default_range
from accounting.selectors.sharing import pool_sharing, require_sharing_reader, sharing_period
from accounting.selectors.usage import (
    OWN,
    UsageQuery,
    current_month,
    estimated_cost_per_hour,
    report_reach,
    request_cost,
)
from accounting.services.budgets import create_budget, delete_budget, update_budget
from accounting.sharing_report import Thresholds
from scheduling.models import Flavor, GpuRequest
from scheduling.selectors.quotas import quota_standing
from scheduling.services.requests import preview_submission
from tenants.errors import DomainError, ForbiddenError
from tenants.models import Project, Team, scope_of


def _positive_int(value: str | None, default: int) -> int:
    return int(value) if value and value.isdigit() and int(value) > 0 else default


@login_required
def request_estimate(request: HttpRequest) -> HttpResponse:
    """HTMX: quota left, cost per hour and what will hold the request (a lead's approval, a
    used-up budget), for the request form's current choices, before it is submitted."""
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
        context["outlook"] = preview_submission(
            actor=request.user,
            project=project,
            flavor=flavor,
            gpu_count=gpu_count,
            priority=request.GET.get("priority", ""),
        )
    return render(request, "accounting/_estimate.html", context)


@login_required
def request_efficiency_fragment(request: HttpRequest, pk: int) -> HttpResponse:
    """HTMX: the request detail page's cost and efficiency card (same selectors as the API)."""
    gpu_request = get_object_or_404(
        GpuRequest.objects.visible_to(request.user).select_related("flavor"), pk=pk
    )
    context = {"efficiency": request_efficiency(gpu_request), "cost": request_cost(gpu_request)}
    return render(request, "accounting/_efficiency.html", context)


@login_required
def approvals(request: HttpRequest) -> HttpResponse:
    """The lead's inbox: approvals and asks with their cost and quota impact (leads, admins)."""
    scope = scope_of(request.user)
    if not (scope.lead_team_ids or scope.is_platform_admin):
        raise Http404
    return render(request, "scheduling/approvals.html", {"rows": lead_inbox(user=request.user)})


# Reports -------------------------------------------------------------------------------------


@login_required
def reports(request: HttpRequest) -> HttpResponse:
    """Usage and chargeback in the portal: a month range, one grouping, drill-down by link."""
    scope = scope_of(request.user)
    if not (scope.team_ids or scope.sees_all_tenants):
        raise Http404
    form = ReportForm(request.GET, group_choices=GROUP_CHOICES, max_months=MAX_MONTHS)
    report, error = None, ""
    if form.is_valid():
        data = form.cleaned_data
        start, end = default_range()
        query = UsageQuery(
            month_from=data["month_from"] or data["month_to"] or start,
            month_to=data["month_to"] or max(end, data["month_from"] or end),
            team_id=data["team"],
            project_id=data["project"],
            pool_id=data["pool"],
            flavor_id=data["flavor"],
            cluster_id=data["cluster"],
            user_id=data["user"],
            group_by=(data["group_by"] or "team",),
        )
        try:
            report = build_report(
                user=request.user,
                query=query,
                group_by=data["group_by"] or "team",
                page_url=reverse("reports-page"),
                api_url=reverse("chargeback" if report_reach(scope) != OWN else "usage"),
            )
        except DomainError as domain_error:
            error = domain_error.message
    status = 200 if report is not None else 400
    return render(
        request,
        "accounting/reports.html",
        {"form": form, "report": report, "error": error, "currency": settings.PORTAL_CURRENCY},
        status=status,
    )


@login_required
def statements_page(request: HttpRequest) -> HttpResponse:
    """Closed monthly statements: finance and admins see every team's, leads their teams'."""
    scope = scope_of(request.user)
    if not (scope.lead_team_ids or scope.sees_all_tenants):
        raise Http404
    statements = Statement.objects.visible_to(request.user).select_related("team", "closed_by")
    return render(request, "accounting/statements.html", {"statements": statements})


@login_required
def statement_detail(request: HttpRequest, pk: int) -> HttpResponse:
    statement = get_object_or_404(
        Statement.objects.visible_to(request.user).select_related("team", "closed_by"), pk=pk
    )
    return render(
        request,
        "accounting/statement_detail.html",
        {"statement": statement, "lines": statement.lines.all()},
    )


# Budgets -------------------------------------------------------------------------------------

WARNING_PERCENT = Decimal(80)  # the first alert threshold: the bar turns amber
DANGER_PERCENT = Decimal(100)  # used up: the bar turns red and the policy applies


@dataclass(frozen=True, slots=True)
class BudgetLine:
    """One budget as the page shows it: this month's burn and whether the viewer may change it."""

    budget: Budget
    unit_label: str
    spent: Decimal
    percent: Decimal
    can_manage: bool
    forecast: Forecast

    @property
    def bar_width(self) -> int:
        return int(min(self.percent, DANGER_PERCENT))

    @property
    def bar_tone(self) -> str:
        if self.percent >= DANGER_PERCENT:
            return "bg-danger"
        return "bg-warning" if self.percent >= WARNING_PERCENT else "bg-success"


def _is_htmx(request: HttpRequest) -> bool:
    """HTMX swaps only 2xx answers, so its form errors come back as 200 fragments."""
    return bool(getattr(request, "htmx", False))


def _managed_teams(user: Any) -> QuerySet[Team]:
    """The teams whose budgets the user may write: a lead's own, every team for an admin."""
    scope = scope_of(user)
    teams = Team.objects.visible_to(user)
    return teams if scope.is_platform_admin else teams.filter(pk__in=scope.lead_team_ids)


def _require_budget_reader(user: Any) -> None:
    """Budgets are for leads, admins and finance; to anyone else the page does not exist."""
    scope = scope_of(user)
    if not (scope.lead_team_ids or scope.sees_all_tenants):
        raise Http404


def _scoped_budgets(user: Any) -> QuerySet[Budget]:
    return with_burn(Budget.objects.visible_to(user).select_related("team", "project"))


def _line(budget: Budget, *, user: Any) -> BudgetLine:
    return BudgetLine(
        budget=budget,
        unit_label=dict(unit_choices()).get(budget.unit, budget.unit),
        spent=spent_of(budget).quantize(Decimal("0.01")),
        percent=percent_used(budget),
        can_manage=scope_of(user).is_lead_of(budget.team_id),
        forecast=forecast_of(budget),
    )


def _budget_for_writing(request: HttpRequest, pk: int) -> Budget:
    """Another team's budget is 404, and so is every budget to a role without the budgets
    page; one the user sees there but may not change is 403."""
    _require_budget_reader(request.user)
    budget = get_object_or_404(_scoped_budgets(request.user), pk=pk)
    if not scope_of(request.user).is_lead_of(budget.team_id):
        raise PermissionDenied("Only the team's lead or a platform admin may change its budgets.")
    return budget


def _page(
    request: HttpRequest,
    *,
    form: BudgetForm | None = None,
    editing: int | None = None,
    edit_form: BudgetChangeForm | None = None,
    notice: str = "",
    status: int = 200,
) -> HttpResponse:
    """The budgets page (or, for HTMX, its body): the create form and every visible budget."""
    teams = _managed_teams(request.user)
    can_create = teams.exists()
    if form is None and can_create:
        form = BudgetForm(teams=teams)
    context = {
        "lines": [_line(budget, user=request.user) for budget in _scoped_budgets(request.user)],
        "form": form if can_create else None,
        "editing": editing,
        "edit_form": edit_form,
        "month": current_month(),
        "notice": notice,
    }
    template = "accounting/_budgets_body.html" if _is_htmx(request) else "accounting/budgets.html"
    return render(request, template, context, status=status)


@login_required
def budgets_page(request: HttpRequest) -> HttpResponse:
    """Budgets with this month's burn; leads and admins also create, change and delete them."""
    _require_budget_reader(request.user)
    return _page(request)


@login_required
@require_POST
def budget_create(request: HttpRequest) -> HttpResponse:
    """Create through `create_budget`; errors come back in the form (HTMX: 200, plain: 400).

    A role that cannot see the budgets page gets its 404; one that reads budgets but may not
    write them (finance) the portal's 403, saying why."""
    _require_budget_reader(request.user)
    teams = _managed_teams(request.user)
    if not teams.exists():
        raise PermissionDenied("Only team leads and platform admins manage budgets.")
    form = BudgetForm(request.POST, teams=teams)
    if form.is_valid():
        try:
            budget = create_budget(actor=request.user, **form.cleaned_data)
        except ForbiddenError as error:
            raise PermissionDenied(error.message) from error
        except DomainError as error:
            form.add_domain_error(error)
        else:
            notice = f"Budget of {budget.project or budget.team} created."
            if not _is_htmx(request):
                messages.success(request, notice)
                return redirect("budgets-page")
            return _page(request, notice=notice)
    return _page(request, form=form, status=200 if _is_htmx(request) else 400)


@login_required
@require_http_methods(["GET", "POST"])
def budget_edit(request: HttpRequest, pk: int) -> HttpResponse:
    """GET: the budget's row as a form; POST: change amount and policy via `update_budget`."""
    budget = _budget_for_writing(request, pk)
    if request.method == "GET":
        form = BudgetChangeForm(
            initial={"amount": budget.amount, "over_budget_policy": budget.over_budget_policy},
            auto_id=f"id_budget_{pk}_%s",
        )
        return _edit_response(request, budget, form)
    form = BudgetChangeForm(request.POST, auto_id=f"id_budget_{pk}_%s")
    if form.is_valid():
        try:
            update_budget(actor=request.user, budget=budget, **form.cleaned_data)
        except ForbiddenError as error:
            raise PermissionDenied(error.message) from error
        except DomainError as error:
            form.add_domain_error(error)
        else:
            if not _is_htmx(request):
                messages.success(request, f"Budget of {budget.project or budget.team} saved.")
                return redirect("budgets-page")
            fresh = _scoped_budgets(request.user).get(pk=pk)
            return render(
                request, "accounting/_budget_row.html", {"line": _line(fresh, user=request.user)}
            )
    return _edit_response(request, budget, form, status=200 if _is_htmx(request) else 400)


def _edit_response(
    request: HttpRequest, budget: Budget, form: BudgetChangeForm, *, status: int = 200
) -> HttpResponse:
    if not _is_htmx(request):
        return _page(request, editing=budget.pk, edit_form=form, status=status)
    fresh = _scoped_budgets(request.user).get(pk=budget.pk)
    context = {"line": _line(fresh, user=request.user), "edit_form": form}
    return render(request, "accounting/_budget_edit_row.html", context, status=status)


@login_required
@require_POST
def budget_delete(request: HttpRequest, pk: int) -> HttpResponse:
    """Delete through `delete_budget` (audited); HTMX swaps the row out with nothing."""
    budget = _budget_for_writing(request, pk)
    owner = budget.project or budget.team
    try:
        delete_budget(actor=request.user, budget=budget)
    except ForbiddenError as error:
        raise PermissionDenied(error.message) from error
    if _is_htmx(request):
        return HttpResponse("")
    messages.success(request, f"Budget of {owner} deleted.")
    return redirect("budgets-page")


# The sharing report ----------------------------------------------------------------------------


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
