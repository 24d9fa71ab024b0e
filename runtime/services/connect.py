"""The route of a notebook or service: the Ingress (or Gateway API HTTPRoute) the kubernetes
backend creates for it."""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

from django.conf import settings
from django.urls import reverse

from runtime.cluster.base import WorkloadRoute
from scheduling.models import GpuRequest
from scheduling.selectors.connect import CONNECTABLE_KINDS, workload_path

log = logging.getLogger(__name__)

# ingress-nginx fills these in per call: back to the same URL after signing in.
SIGNIN_URL = "$scheme://$host{login}?next=$escaped_request_uri"


def workload_route(gpu_request: GpuRequest) -> WorkloadRoute | None:
    """The Ingress or HTTPRoute of a notebook or service, or None (jobs, `WORKLOAD_ROUTE=none`,
    or no absolute portal URL for the proxy's auth check to call)."""
    if settings.WORKLOAD_ROUTE == "none" or gpu_request.kind not in CONNECTABLE_KINDS:
        return None
    base = urlsplit(settings.WORKLOAD_BASE_URL)
    portal = settings.PORTAL_INTERNAL_URL or (
        f"{base.scheme}://{base.netloc}" if base.scheme and base.netloc else ""
    )
    if not portal:
        if settings.CLUSTER_BACKEND != "kubernetes":
            return None  # the simulated cluster serves its placeholder without a route
        log.warning(
            "no route for request %s: WORKLOAD_BASE_URL is a path and PORTAL_INTERNAL_URL is "
            "not set, so the proxy has no portal URL to check access with",
            gpu_request.pk,
        )
        return None
    return WorkloadRoute(
        path=workload_path(gpu_request.pk),
        host=base.hostname or "",
        auth_url=portal + reverse("workload-auth", kwargs={"pk": gpu_request.pk}),
        signin_url=SIGNIN_URL.format(login=reverse("login")),
        ingress_class=settings.WORKLOAD_INGRESS_CLASS or None,
        tls_secret=settings.WORKLOAD_TLS_SECRET or None,
        # A notebook is started with its path as base URL; a service sees paths from "/".
        strip_prefix=gpu_request.kind != "notebook",
        kind="httproute" if settings.WORKLOAD_ROUTE == "httproute" else "ingress",
        gateway_name=settings.WORKLOAD_GATEWAY_NAME,
        gateway_namespace=settings.WORKLOAD_GATEWAY_NAMESPACE,
        gateway_section=settings.WORKLOAD_GATEWAY_SECTION,
    )
