"""The door to notebooks and services: the proxy's access check and the simulated workload."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils.dateparse import parse_datetime
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from runtime.selectors.workloads import LIVE_STATUSES
from runtime.services import inspection
from scheduling.models import GpuRequest
from scheduling.selectors.connect import connectable_request, current_allocation

PAGE_TAIL = 100
PAGE_POLL_SECONDS = 5


@never_cache
@require_safe
def workload_auth(request: HttpRequest, pk: int) -> HttpResponse:
    """The external auth of a workload's Ingress (ingress-nginx `auth-url`), called before
    every request to the notebook or service with the caller's cookies.

    200 for who may see the request (owner, team lead, platform admin), 401 for anonymous (the
    proxy then sends the browser to sign in), 403 for everyone else — also for ids that do not
    exist, so the answer tells nothing about other tenants' requests. Not 404: ingress-nginx
    turns any answer but 2xx, 401 and 403 into a 500 for the browser.
    """
    if not request.user.is_authenticated:
        return HttpResponse(status=401)
    if connectable_request(request.user, pk) is None:
        return HttpResponse(status=403)
    response = HttpResponse(status=200)
    response["X-Auth-Request-User"] = request.user.get_username()
    return response


@never_cache
@require_safe
def simulated_workload(request: HttpRequest, pk: int) -> HttpResponse:
    """What the simulated cluster serves at a notebook's or service's URL: a placeholder behind
    the same check as the real route (anonymous → sign in; not theirs → 404)."""
    if settings.CLUSTER_BACKEND != "simulated":
        raise Http404("Served by the cluster's ingress.")
    if not request.user.is_authenticated:
        return redirect_to_login(request.get_full_path())
    gpu_request = connectable_request(request.user, pk)
    if gpu_request is None:
        raise Http404("No such notebook or service.")
    return render(
        request,
        "runtime/simulated_workload.html",
        {"gpu_request": gpu_request, "is_running": gpu_request.status == "running"},
        status=200 if gpu_request.status == "running" else 503,
    )


@require_safe
def request_inspect(request: HttpRequest, pk: int) -> HttpResponse:
    """The request page's live panel (polled by htmx): the log tail and the events, escaped
    by the template (log text is the workload's, never markup)."""
    gpu_request = get_object_or_404(
        GpuRequest.objects.visible_to(request.user).select_related("project"), pk=pk
    )
    error = ""
    try:
        lines = inspection.log_lines(gpu_request, tail=PAGE_TAIL)
    except inspection.InspectUnavailable as unavailable:
        lines, error = [], str(unavailable)
    events = inspection.request_events(gpu_request)
    return render(
        request,
        "runtime/_inspect.html",
        {
            "gpu_request": gpu_request,
            "allocation": current_allocation(gpu_request),
            "lines": lines,
            "with_pod": len({line["pod"] for line in lines}) > 1,
            "log_error": error,
            "events": [
                {**event, "when": parse_datetime(event["at"]) if event["at"] else None}
                for event in events["results"]
            ],
            "cluster_error": events["cluster_error"],
            "is_live": gpu_request.status in LIVE_STATUSES,
            "poll_seconds": PAGE_POLL_SECONDS,
        },
    )
