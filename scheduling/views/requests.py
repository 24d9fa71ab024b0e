"""Pages of the request side: the request form, my requests, a request's page and its
actions, and the lead's decisions on pending requests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db import models
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseClientRefresh

from scheduling.choices import (
    CANCELLABLE_STATUSES,
    FINISHED_STATUSES,
    RESUMABLE_KINDS,
    FlavorKind,
    RequestStatus,
    WorkloadKind,
)
from scheduling.filters import RequestListFilter, list_title
from scheduling.forms import (
    WHOLE_LIFE,
    DecisionForm,
    GpuRequestForm,
    TimeRangeForm,
    initial_from_body,
)
from scheduling.models import Flavor, GpuRequest, RequestTemplate
from scheduling.models.catalog import NotebookProfile
from scheduling.selectors.approvals import approval_inbox, deferring_lead
from scheduling.selectors.catalog import flavors_for_project
from scheduling.selectors.clusters import placed_cluster
from scheduling.selectors.governance import governance_rules
from scheduling.selectors.notebooks import profile_body, profiles_for_project
from scheduling.selectors.preemptions import last_preemption
from scheduling.selectors.queue import fill_queue_positions
from scheduling.selectors.quotas import queue_quota_impacts, quota_impact
from scheduling.selectors.timeline import request_activity_chart, request_life, window_between
from scheduling.services.blockers import shown_blocker
from scheduling.services.estimates import (
    ESTIMATE_FIELDS,
    estimate_queued_request,
    what_if_for_project,
)
from scheduling.services.governance import (
    ask_lead,
    extend_runtime,
    grant_idle_exemption,
    keep_notebook_alive,
)
from scheduling.services.requests import (
    approve_gpu_request,
    approve_when_quota_frees,
    cancel_gpu_request,
    reject_gpu_request,
    resume_gpu_request,
    submit_gpu_request,
)
from scheduling.services.templates import (
    request_body_of,
    resubmit_gpu_request,
    save_request_as_template,
    template_body_of,
)
from tenants.errors import DomainError, show_on_form
from tenants.models import AuditEvent, Project, scope_of


def _member_projects(user: Any) -> QuerySet[Project]:
    scope = scope_of(user)
    projects = Project.objects.visible_to(user).select_related("team")
    if not scope.is_platform_admin:
        projects = projects.filter(team_id__in=scope.team_ids)
    return projects


def _form_flavors(
    project: Project | None, kind: str = "", flavor_kind: str = ""
) -> QuerySet[Flavor]:
    """The flavors the project may use, only those whose pool runs `kind` when one is given,
    and only whole cards, vGPU shares or MIG slices when `flavor_kind` says so."""
    if project is None:
        return Flavor.objects.none()
    flavors = flavors_for_project(project=project)
    if flavor_kind in FlavorKind.values:
        flavors = flavors.filter(kind=flavor_kind)
    if kind in WorkloadKind.values:
        # allowed_kinds is a JSON list (empty: every kind); filtered here, as SQLite has no
        # JSON containment lookup. A project may use a handful of flavors.
        allowed = [flavor.pk for flavor in flavors if flavor.pool.allows_kind(kind)]
        flavors = flavors.filter(pk__in=allowed)
    return flavors


def _chosen_project(
    request: HttpRequest, projects: QuerySet[Project], fallback: Any = None
) -> Project | None:
    project_id = request.POST.get("project") or request.GET.get("project") or fallback
    if project_id and str(project_id).isdigit():
        return projects.filter(pk=project_id).first()
    return projects.first()


def _starting_point(
    request: HttpRequest,
    templates: QuerySet[RequestTemplate],
    profiles: list[NotebookProfile],
) -> dict[str, Any]:
    """The form's initial values: a chosen notebook profile's (?profile=), a template's
    (?template=), or a request's to clone (?clone=); each must be one the user may use, else
    the form starts empty."""
    body: dict[str, Any] = {}
    template_id, clone_id = request.GET.get("template", ""), request.GET.get("clone", "")
    profile_id = request.GET.get("profile", "")
    if profile_id.isdigit():
        profile = next((p for p in profiles if p.pk == int(profile_id)), None)
        if profile is not None:
            body = profile_body(profile)
    elif template_id.isdigit():
        template = templates.filter(pk=template_id).first()
        if template is not None:
            body = template_body_of(template)
    elif clone_id.isdigit():
        source = GpuRequest.objects.visible_to(request.user).filter(pk=clone_id).first()
        if source is not None:
            body = request_body_of(source)
    initial = initial_from_body(body)
    return {
        key: value.pk if isinstance(value, models.Model) else value
        for key, value in initial.items()
    }


def submitted_message(created: GpuRequest, *, again: bool = False) -> str:
    """The flash after a submission. It names no status a scheduling cycle could have moved on
    from by the time the page shows (the badge says where the request is): only whether a
    lead must approve it, which nothing but the lead changes."""
    what = (
        f"Submitted again as request {created.pk}" if again else f"Request {created.pk} submitted"
    )
    if created.status == RequestStatus.PENDING_APPROVAL:
        return f"{what}: it waits for your team lead's approval."
    return f"{what} and approved at once."


@login_required
def request_list(request: HttpRequest) -> HttpResponse:
    requests = GpuRequest.objects.visible_to(request.user).select_related(
        "flavor", "project", "owner"
    )
    filters = RequestListFilter(request.GET, queryset=requests, request=request)
    page = Paginator(filters.qs, 25).get_page(request.GET.get("page"))
    kept = request.GET.copy()
    kept.pop("page", None)
    return render(
        request,
        "scheduling/request_list.html",
        {
            "page": page,
            "filters": filters,
            "title": list_title(request.user),
            "filtered": any(value for key, value in kept.items()),
            "kept_query": kept.urlencode(),
        },
    )


@login_required
def request_new(request: HttpRequest) -> HttpResponse:
    """The request form; the team's templates first, then one's own, fill it in."""
    projects = _member_projects(request.user)
    templates = RequestTemplate.objects.visible_to(request.user).select_related("team")
    # The profiles follow the project named in the query (or the first): a profile holds none.
    profiles = profiles_for_project(project=_chosen_project(request, projects))
    initial = _starting_point(request, templates, profiles)
    project = _chosen_project(request, projects, initial.get("project"))
    kind = request.POST.get("kind") or initial.get("kind") or WorkloadKind.JOB
    form = GpuRequestForm(
        request.POST or None,
        projects=projects,
        flavors=_form_flavors(project, kind),
        initial={**initial, "project": project},
    )
    if request.method == "POST" and form.is_valid():
        try:
            created = submit_gpu_request(actor=request.user, spec=form.spec())
        except DomainError as error:
            show_on_form(form, error)
        else:
            messages.success(request, submitted_message(created))
            return redirect("gpu-request-page", pk=created.pk)
    return render(
        request,
        "scheduling/request_form.html",
        {
            "form": form,
            "project": project,
            "templates": templates,
            "chosen_template": request.GET.get("template", ""),
            "profiles": profiles,
            "chosen_profile": request.GET.get("profile", ""),
            "flavor_kinds": FlavorKind.choices,
        },
    )


@login_required
def request_form_flavors(request: HttpRequest) -> HttpResponse:
    """HTMX: the flavor options a project may use for a kind, when either selection changes."""
    project = _chosen_project(request, _member_projects(request.user))
    return render(
        request,
        "scheduling/_flavor_options.html",
        {
            "flavors": _form_flavors(
                project, request.GET.get("kind", ""), request.GET.get("flavor_kind", "")
            ),
            "selected": request.GET.get("flavor", ""),
        },
    )


def _what_if_number(value: str | None, default: float, *, low: float, high: float) -> float:
    try:
        number = float(value) if value else default
    except ValueError:
        return default
    return min(max(number, low), high)


@login_required
def request_what_if(request: HttpRequest) -> HttpResponse:
    """HTMX: for each flavor the chosen project may use, when a request of the form's size
    submitted now would likely start (scheduling/services/estimates.py)."""
    project = _chosen_project(request, _member_projects(request.user))
    gpu_count = int(_what_if_number(request.GET.get("gpu_count"), 1, low=1, high=1024))
    hours = _what_if_number(request.GET.get("max_runtime_hours"), 2, low=1 / 60, high=90 * 24)
    kind = request.GET.get("kind", "")
    rows = (
        what_if_for_project(
            project=project,
            owner=request.user,
            gpu_count=gpu_count,
            max_runtime_seconds=int(hours * 3600),
            kind=kind if kind in WorkloadKind.values else WorkloadKind.JOB,
        )
        if project is not None
        else []
    )
    return render(request, "scheduling/_what_if.html", {"rows": rows, "gpu_count": gpu_count})


@login_required
def request_detail(request: HttpRequest, pk: int) -> HttpResponse:
    gpu_request = get_object_or_404(
        GpuRequest.objects.visible_to(request.user).select_related(
            "flavor", "project", "owner", "preempted_by__team"
        ),
        pk=pk,
    )
    # Just approved: its estimate now rather than after the next refresh.
    if (
        gpu_request.status == RequestStatus.QUEUED
        and gpu_request.estimated_start_at is None
        and estimate_queued_request(request_id=gpu_request.pk)
    ):
        gpu_request.refresh_from_db(fields=ESTIMATE_FIELDS)
    fill_queue_positions([gpu_request])
    history = (
        AuditEvent.objects.filter(target_type="GpuRequest", target_id=str(gpu_request.pk))
        .select_related("actor")
        .order_by("occurred_at", "id")
    )
    activity = _request_activity(request, gpu_request)
    scope = scope_of(request.user)
    is_pending = gpu_request.status == RequestStatus.PENDING_APPROVAL
    return render(
        request,
        "scheduling/request_detail.html",
        {
            "gpu_request": gpu_request,
            "placed_cluster": None if gpu_request.cluster_id else placed_cluster(gpu_request),
            "quota_impact": quota_impact(gpu_request=gpu_request) if is_pending else None,
            "deferred_by": deferring_lead(gpu_request) if is_pending else None,
            "blocker": shown_blocker(gpu_request.status, gpu_request.blocker),
            "preemption": last_preemption(gpu_request),
            "history": history,
            "can_cancel": gpu_request.status in CANCELLABLE_STATUSES,
            "is_live": gpu_request.status in (RequestStatus.RUNNING, RequestStatus.LAUNCHING),
            "status_watch_seconds": STATUS_WATCH_SECONDS.get(gpu_request.status),
            "is_finished": gpu_request.status in FINISHED_STATUSES,
            "can_resume": gpu_request.status == RequestStatus.RECLAIMED
            and gpu_request.kind in RESUMABLE_KINDS,
            "is_owner": gpu_request.owner_id == request.user.pk,
            "is_lead": scope.is_lead_of(gpu_request.team_id),
            "governance": governance_rules(gpu_request=gpu_request),
            **activity,
        },
        status=400 if activity["range_form"].errors else 200,
    )


# A request on its way to running: its page asks every few seconds whether it moved, and reloads
# when it did (a notebook's Open button appears without the user reloading). A lead's decision
# can take hours: asked less often.
STATUS_WATCH_SECONDS = {
    RequestStatus.PENDING_APPROVAL: 15,
    RequestStatus.APPROVED: 3,
    RequestStatus.QUEUED: 3,
    RequestStatus.ADMITTED: 2,
    RequestStatus.LAUNCHING: 2,
}


@login_required
def request_status_watch(request: HttpRequest, pk: int) -> HttpResponse:
    """HTMX, polled by the request page: 204 while the request is still in the status the page
    shows (`seen`), otherwise an empty answer that tells htmx to reload the page."""
    status = (
        GpuRequest.objects.visible_to(request.user)
        .filter(pk=pk)
        .values_list("status", flat=True)
        .first()
    )
    if status is None:
        raise Http404("No such request.")
    if status == request.GET.get("seen"):
        return HttpResponse(status=204)
    return HttpResponseClientRefresh()


def _request_activity(request: HttpRequest, gpu_request: GpuRequest) -> dict[str, Any]:
    """The activity section: its range (the whole life by default: first start to now, or to
    its end) and the chart over it; no chart before the request first started."""
    form = TimeRangeForm(request.GET, default=WHOLE_LIFE, whole_life=True)
    now = timezone.now()
    life = request_life(gpu_request=gpu_request, now=now)
    bounds = form.bounds(now=now, life=life)
    if bounds is None:
        return {"range_form": form, "window": None, "activity_chart": None}
    window = window_between(*bounds)
    return {
        "range_form": form,
        "window": window,
        "activity_chart": request_activity_chart(gpu_request=gpu_request, window=window),
    }


GOVERNANCE_ACTIONS = {"ask-idle-exemption", "ask-extension", "idle-exemption", "extend", "resume"}


@login_required
@require_POST
def request_govern(request: HttpRequest, pk: int, action: str) -> HttpResponse:
    """Owner asks for more time or an idle exemption; the lead grants them."""
    gpu_request = get_object_or_404(GpuRequest.objects.visible_to(request.user), pk=pk)
    if action not in GOVERNANCE_ACTIONS:
        raise Http404
    text = request.POST.get("text", "")
    try:
        if action == "resume":
            resume_gpu_request(actor=request.user, request=gpu_request)
            messages.success(request, "Back in the queue with the same settings.")
        elif action.startswith("ask-"):
            about = "idle_exemption" if action == "ask-idle-exemption" else "extension"
            ask_lead(actor=request.user, request=gpu_request, about=about, reason=text)
            messages.success(request, "Your team lead has been asked.")
        elif action == "idle-exemption":
            hours = int(request.POST.get("amount", "0") or 0)
            if not 1 <= hours <= 72:
                raise DomainError("invalid", "Give 1 to 72 hours.")
            grant_idle_exemption(actor=request.user, request=gpu_request, hours=hours, comment=text)
            messages.success(request, f"Exempt from idle reclamation for {hours} h.")
        else:
            extra_hours = float(request.POST.get("amount", "0") or 0)
            if not 0 < extra_hours <= 720:
                raise DomainError("invalid", "Give up to 720 hours.")
            extend_runtime(
                actor=request.user,
                request=gpu_request,
                seconds=int(extra_hours * 3600),
                comment=text,
            )
            messages.success(request, f"Max runtime extended by {extra_hours:g} h.")
    except (DomainError, ValueError) as error:
        messages.error(request, getattr(error, "message", "Give a number."))
    if request.POST.get("next") == "approvals":
        return redirect("approvals-page")
    return redirect("gpu-request-page", pk=pk)


def _back(request: HttpRequest, pk: int) -> HttpResponse:
    """Back to the home page when the action came from there, else to the request's page."""
    if request.POST.get("next") == "home":
        return redirect("home")
    return redirect("gpu-request-page", pk=pk)


@login_required
@require_POST
def request_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    """Cancel a request; a running one is stopped (a notebook: "Stop my server")."""
    gpu_request = get_object_or_404(GpuRequest.objects.visible_to(request.user), pk=pk)
    was_running = gpu_request.status in (RequestStatus.RUNNING, RequestStatus.LAUNCHING)
    try:
        cancel_gpu_request(actor=request.user, request=gpu_request)
    except DomainError as error:
        messages.error(request, error.message)
    else:
        what = gpu_request.name or f"Request {pk}"
        messages.success(request, f"{what} stopped." if was_running else f"{what} cancelled.")
    return _back(request, pk)


@login_required
@require_POST
def request_keep_alive(request: HttpRequest, pk: int) -> HttpResponse:
    """The owner of a running notebook pushes its idle deadline as far as the tier allows."""
    gpu_request = get_object_or_404(
        GpuRequest.objects.visible_to(request.user).select_related("flavor__pool__tier"), pk=pk
    )
    try:
        kept = keep_notebook_alive(actor=request.user, request=gpu_request)
    except DomainError as error:
        messages.error(request, error.message)
    else:
        until = timezone.localtime(kept.idle_exempt_until).strftime("%Y-%m-%d %H:%M %Z")
        messages.success(request, f"Kept alive: not reclaimed for idling before {until}.")
    return _back(request, pk)


@login_required
@require_POST
def request_resubmit(request: HttpRequest, pk: int) -> HttpResponse:
    """Submit a finished request's body again at once, and show the new request."""
    gpu_request = get_object_or_404(
        GpuRequest.objects.visible_to(request.user).select_related("project", "flavor"), pk=pk
    )
    try:
        created = resubmit_gpu_request(actor=request.user, request=gpu_request)
    except DomainError as error:
        messages.error(request, error.message)
        return redirect("gpu-request-page", pk=pk)
    messages.success(request, submitted_message(created, again=True))
    return redirect("gpu-request-page", pk=created.pk)


@login_required
@require_POST
def request_save_template(request: HttpRequest, pk: int) -> HttpResponse:
    """Keep a request's body as a template: one's own, or (a lead) the team's."""
    gpu_request = get_object_or_404(GpuRequest.objects.visible_to(request.user), pk=pk)
    try:
        template = save_request_as_template(
            actor=request.user,
            request=gpu_request,
            name=request.POST.get("name", "")[:80],
            is_shared=request.POST.get("is_shared") == "on",
        )
    except DomainError as error:
        messages.error(request, error.message)
    else:
        whose = "the team's" if template.is_shared else "your"
        messages.success(request, f"Saved as {whose} template “{template.name}”.")
    return redirect("gpu-request-page", pk=pk)


@login_required
@require_POST
def approval_decide(request: HttpRequest, pk: int, decision: str) -> HttpResponse:
    """HTMX: approve, reject, or approve to run when quota frees ("defer") one request from
    the inbox, and swap its row."""
    if decision not in DECISIONS:
        raise Http404
    gpu_request = get_object_or_404(GpuRequest.objects.visible_to(request.user), pk=pk)
    form = DecisionForm(request.POST)
    comment = form.cleaned_data["comment"] if form.is_valid() else ""
    error = None
    try:
        DECISIONS[decision](actor=request.user, request=gpu_request, comment=comment)
    except DomainError as domain_error:
        error = domain_error.message
    gpu_request.refresh_from_db()
    row: dict[str, Any] = {"kind": "approval", "request": gpu_request}
    if gpu_request.status == RequestStatus.PENDING_APPROVAL:
        # Still pending (refused, or approved to run when quota frees): say where it stands,
        # counted in queue order as on the inbox page.
        queue = queue_quota_impacts(gpu_requests=list(approval_inbox(user=request.user)))
        row["impact"] = queue.get(gpu_request.pk) or quota_impact(gpu_request=gpu_request)
        row["is_deferred"] = deferring_lead(gpu_request) is not None
    response = render(request, "scheduling/_approval_row.html", {"row": row, "error": error})
    if gpu_request.status == RequestStatus.REJECTED:
        # The rows below counted this request's units in their quota impact: reload the inbox.
        # (An approval moves the same units from "asked above" to "in use": they stay right.)
        response["HX-Refresh"] = "true"
    return response


DECISIONS: dict[str, Callable[..., GpuRequest]] = {
    "approve": approve_gpu_request,
    "reject": reject_gpu_request,
    "defer": approve_when_quota_frees,
}


BULK_VERBS = {
    "approve": "Approved",
    "reject": "Rejected",
    "defer": "Approved",
}


@login_required
@require_POST
def approvals_bulk(request: HttpRequest) -> HttpResponse:
    """Approve, reject, or approve to run when quota frees ("defer") the ticked requests of the
    inbox at once; one message sums it up. A plain approval over the quota limit is refused and
    the message offers the deferred approval; a deferred one waits pending, marked, until the
    team's work frees enough quota (then it is approved and queued)."""
    decision = request.POST.get("decision", "")
    if decision not in BULK_VERBS:
        messages.error(request, "Choose approve, reject, or approve to run when quota frees.")
        return redirect("approvals-page")
    ids = [int(pk) for pk in request.POST.getlist("ids") if pk.isdigit()]
    comment = request.POST.get("comment", "")[:2000]
    done: list[str] = []
    waiting: list[str] = []
    over_quota: list[str] = []
    refused: list[str] = []
    ticked = GpuRequest.objects.visible_to(request.user).filter(pk__in=ids)
    # In queue order, as the inbox counts quota impact: the oldest are approved first.
    for gpu_request in ticked.order_by("created_at", "pk"):
        try:
            decided = DECISIONS[decision](actor=request.user, request=gpu_request, comment=comment)
        except DomainError as error:
            if error.code == "quota_exceeded":
                over_quota.append(f"#{gpu_request.pk}")
            else:
                refused.append(f"#{gpu_request.pk}: {error.message}")
        else:
            pending = decided.status == RequestStatus.PENDING_APPROVAL
            (waiting if pending else done).append(f"#{decided.pk}")
    if done:
        messages.success(request, f"{BULK_VERBS[decision]} {len(done)}: {', '.join(done)}.")
    if waiting:
        messages.info(
            request,
            f"Approved to run when quota frees {len(waiting)}: {', '.join(waiting)}. "
            "They wait for the team's work to free quota, then are queued.",
        )
    if over_quota:
        messages.error(
            request,
            f"Not approved, over the quota limit: {', '.join(over_quota)}. Tick them and "
            "choose “Approve ticked, run when quota frees” to approve them to run as soon as "
            "quota frees.",
        )
    if refused:
        messages.error(request, "Not decided — " + " ".join(refused))
    if not ids:
        messages.error(request, "Tick the requests to decide on first.")
    return redirect("approvals-page")
