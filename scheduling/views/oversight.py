"""Pages for leads and platform admins: the team quotas with their split over projects, and
the audit log."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from scheduling.forms import ProjectQuotaForm
from scheduling.models import Flavor
from scheduling.selectors.quotas import quota_rows
from scheduling.services.quotas import set_quota
from tenants.errors import DomainError
from tenants.models import AuditEvent, Project, scope_of
from tenants.selectors import audit_rows, filter_audit_events


@login_required
def quotas(request: HttpRequest) -> HttpResponse:
    """Each team quota per flavor, what is used, queued and borrowed, and its project split."""
    return render(request, "scheduling/quotas.html", {"rows": quota_rows(user=request.user)})


@login_required
@require_POST
def project_quota_set(request: HttpRequest, project_id: int, flavor_id: int) -> HttpResponse:
    """Save one project's split; on an error the page comes back with what was typed and the
    error beside it (400), not a redirect that forgets both."""
    project = get_object_or_404(Project.objects.visible_to(request.user), pk=project_id)
    flavor = get_object_or_404(Flavor.objects.visible_to(request.user), pk=flavor_id)
    form = ProjectQuotaForm(request.POST)
    error = "Give whole numbers of 0 or more for guaranteed and limit."
    if form.is_valid():
        try:
            set_quota(
                actor=request.user,
                team=project.team,
                project=project,
                flavor=flavor,
                **form.cleaned_data,
            )
        except DomainError as domain_error:
            error = domain_error.message
        else:
            messages.success(request, f"Quota of {project} for {flavor} saved.")
            return redirect("quotas-page")
    failed = {
        "key": f"{project.pk}-{flavor.pk}",
        "error": error,
        "guaranteed": request.POST.get("guaranteed", ""),
        "limit": request.POST.get("limit", ""),
    }
    return render(
        request,
        "scheduling/quotas.html",
        {"rows": quota_rows(user=request.user), "failed": failed},
        status=400,
    )


@login_required
def audit_log(request: HttpRequest) -> HttpResponse:
    scope = scope_of(request.user)
    if not (scope.lead_team_ids or scope.is_platform_admin):
        raise Http404
    filters = {
        name: request.GET.get(name, "").strip()
        for name in ("action", "actor", "target_type", "target_id", "since", "until")
    }
    events = filter_audit_events(
        AuditEvent.objects.visible_to(request.user).select_related("actor", "team"), **filters
    )
    page = Paginator(events, 50).get_page(request.GET.get("page"))
    rows = audit_rows(page.object_list)
    visible = AuditEvent.objects.visible_to(request.user).order_by()
    choices = {
        "target_types": sorted(set(visible.values_list("target_type", flat=True).distinct())),
        "actors": sorted(
            set(visible.values_list("actor__username", flat=True).distinct()) - {None}
        ),
    }
    query = urlencode({name: value for name, value in filters.items() if value})
    return render(
        request,
        "scheduling/audit.html",
        {"page": page, "rows": rows, "filters": filters, "query": query, **choices},
    )
