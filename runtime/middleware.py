"""Requests for a workload's own host (`<id>.WORKLOAD_DOMAIN`) never reach the portal's pages.

On such a host the portal answers only the callback that turns a link from /connect/ into the
workload cookie (the Ingress routes `/_portal/` there) and, with the simulated cluster, plays
the Ingress itself: the same check, then a placeholder. Everything else is 404, so no portal
page, session or CSRF cookie is ever served on a workload's origin.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseNotFound

from runtime import views
from runtime.services.workload_access import CALLBACK_PATH
from scheduling.selectors.connect import request_id_of_host


class WorkloadHostMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        request_id = request_id_of_host(request.get_host())
        if request_id is None:
            return self.get_response(request)
        if request.path == CALLBACK_PATH:
            return views.workload_callback(request, request_id)
        if settings.CLUSTER_BACKEND == "simulated":
            return views.simulated_workload(request, request_id)
        return HttpResponseNotFound("Served by the cluster's ingress.", content_type="text/plain")
