"""The doors to notebooks and services: the portal's connect page, the callback on each
workload's own host, the Ingress's access check, and the simulated cluster's placeholder.

The flow and the credential are in `runtime/services/workload_access.py`.
"""

from __future__ import annotations

from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.template.loader import render_to_string
from django.utils.dateparse import parse_datetime
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe
from redis.exceptions import RedisError

from runtime.selectors.workloads import LIVE_STATUSES
from runtime.services import inspection, workload_access
from scheduling.choices import WorkloadKind
from scheduling.models import GpuRequest
from scheduling.selectors.connect import connectable_request, current_allocation, workload_origin

PAGE_TAIL = 100
PAGE_POLL_SECONDS = 5
#: The workload page's own policy: no script, nothing from elsewhere.
PLACEHOLDER_CSP = "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'"


def _workload_path(candidate: str | None) -> str:
    """A path on the workload's host to land on (`next`), never another host."""
    if (
        not candidate
        or not candidate.startswith("/")
        or not url_has_allowed_host_and_scheme(candidate, allowed_hosts=None)
    ):
        return "/"
    return candidate


@never_cache
@require_safe
@login_required
def workload_connect(request: HttpRequest, pk: int) -> HttpResponse:
    """Open a notebook or service: for who may see the request (owner, team lead, platform
    admin), a redirect to the workload's own host with a one-use link token; 404 for others."""
    if connectable_request(request.user, pk) is None:
        raise Http404("No such notebook or service.")
    token = workload_access.mint_link_token(user=request.user, request_id=pk)
    query = urlencode({"token": token, "next": _workload_path(request.GET.get("next"))})
    response = HttpResponseRedirect(f"{workload_origin(pk)}{workload_access.CALLBACK_PATH}?{query}")
    response["Referrer-Policy"] = "no-referrer"
    return response


@never_cache
def workload_callback(request: HttpRequest, pk: int) -> HttpResponse:
    """On the workload's own host: redeem the link token once, set the host-only workload
    cookie and go on to `next`; a link that is forged, expired, used or no longer allowed is
    refused (403) with the way back to the portal."""
    try:
        access = workload_access.redeem_link_token(request.GET.get("token", ""), request_id=pk)
    except RedisError:  # the one-use check needs the cache: retry rather than an error page
        return HttpResponse("Try again in a moment.", status=503, content_type="text/plain")
    if access.status != 200:
        return _refusal(request, pk, status=403)
    response = HttpResponseRedirect(_workload_path(request.GET.get("next")))
    workload_access.set_workload_cookie(response, user=access.user, request_id=pk)
    response["Referrer-Policy"] = "no-referrer"
    return response


@never_cache
@require_safe
def workload_auth(request: HttpRequest, pk: int) -> HttpResponse:
    """The external auth of a workload's Ingress (ingress-nginx `auth-url`), called before
    every request to the notebook or service with the cookies the browser sent to the
    workload's host: the portal's own cookies never arrive here, only the workload cookie.

    200 for a valid cookie of this workload whose user may see the request (owner, team lead,
    platform admin), with the user's name and, for a notebook, its Jupyter token as
    `Authorization` for the Ingress to pass on; 401 without one (the proxy sends the browser to
    the portal's /connect/); 403 when the user may not — also for ids that do not exist, so the
    answer tells nothing about other tenants' requests. Not 404: ingress-nginx turns any answer
    but 2xx, 401 and 403 into a 500 for the browser.
    """
    access = workload_access.check_cookie(
        request.COOKIES.get(workload_access.COOKIE_NAME), request_id=pk
    )
    response = HttpResponse(status=access.status)
    if access.status == 200 and access.gpu_request is not None:
        response["X-Auth-Request-User"] = access.user.get_username()
        if access.gpu_request.kind == WorkloadKind.NOTEBOOK:
            response["Authorization"] = f"token {workload_access.notebook_token(pk)}"
    return response


@never_cache
def simulated_workload(request: HttpRequest, pk: int) -> HttpResponse:
    """What the simulated cluster serves on a workload's host, behind the same check as a real
    route: without a workload cookie, off to the portal's /connect/ (401 when PORTAL_URL is not
    set); not theirs, 403; else a placeholder that lists the names (never the values) of the
    headers and cookies that reached it."""
    if request.method not in ("GET", "HEAD"):
        return HttpResponse(status=405)
    access = workload_access.check_cookie(
        request.COOKIES.get(workload_access.COOKIE_NAME), request_id=pk
    )
    if access.status == 401 and settings.PORTAL_URL:
        query = urlencode({"next": _workload_path(request.get_full_path())})
        return HttpResponseRedirect(f"{settings.PORTAL_URL}/connect/{pk}/?{query}")
    if access.status != 200 or access.gpu_request is None:
        return _refusal(request, pk, status=access.status)
    gpu_request = access.gpu_request
    # No context processors: this host has no session, no user and no CSP nonce of the portal.
    response = HttpResponse(
        render_to_string(
            "runtime/simulated_workload.html",
            {
                "gpu_request": gpu_request,
                "user_name": access.user.get_username(),
                "is_running": gpu_request.status == "running",
                "header_names": sorted(
                    key[5:].replace("_", "-").title()
                    for key in request.META
                    if key.startswith("HTTP_")
                ),
                "cookie_names": sorted(request.COOKIES),
            },
        ),
        status=200 if gpu_request.status == "running" else 503,
    )
    response["Content-Security-Policy"] = PLACEHOLDER_CSP
    return response


def _refusal(request: HttpRequest, pk: int, *, status: int) -> HttpResponse:
    response = HttpResponse(
        render_to_string(
            "runtime/workload_refused.html",
            {"connect_url": f"{settings.PORTAL_URL}/connect/{pk}/" if settings.PORTAL_URL else ""},
        ),
        status=status,
    )
    response["Content-Security-Policy"] = PLACEHOLDER_CSP
    return response


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
