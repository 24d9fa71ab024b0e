"""The route of a notebook or service: the Ingress (or Gateway API HTTPRoute) the kubernetes
backend creates for it on the workload's own host, and its notebook token."""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

from django.conf import settings
from django.urls import reverse

from runtime.cluster.base import WorkloadRoute
from runtime.services.workload_access import notebook_token
from scheduling.choices import WorkloadKind
from scheduling.models import GpuRequest
from scheduling.selectors.connect import CONNECTABLE_KINDS, workload_host

log = logging.getLogger(__name__)

# ingress-nginx fills this in per call: back to the same path once the portal let them in.
CONNECT_NEXT = "?next=$escaped_request_uri"


def workload_route(gpu_request: GpuRequest) -> WorkloadRoute | None:
    """The Ingress or HTTPRoute of a notebook or service on `<id>.WORKLOAD_DOMAIN`, or None
    (jobs, `WORKLOAD_ROUTE=none`, or no absolute portal URLs for the proxy to check access with
    and to send the browser to)."""
    if settings.WORKLOAD_ROUTE == "none" or gpu_request.kind not in CONNECTABLE_KINDS:
        return None
    internal = settings.PORTAL_INTERNAL_URL or settings.PORTAL_URL
    if not internal or not settings.PORTAL_URL:
        if settings.CLUSTER_BACKEND != "kubernetes":
            return None  # the simulated cluster serves its placeholder without a route
        log.warning(
            "no route for request %s: PORTAL_URL (and PORTAL_INTERNAL_URL) must be set for the "
            "proxy to check access and to send the browser to the portal",
            gpu_request.pk,
        )
        return None
    portal = urlsplit(internal)
    return WorkloadRoute(
        path="/",
        host=workload_host(gpu_request.pk).split(":")[0],
        auth_url=internal + reverse("workload-auth", kwargs={"pk": gpu_request.pk}),
        signin_url=settings.PORTAL_URL
        + reverse("workload-connect", kwargs={"pk": gpu_request.pk})
        + CONNECT_NEXT,
        ingress_class=settings.WORKLOAD_INGRESS_CLASS or None,
        tls_secret=settings.WORKLOAD_TLS_SECRET or None,
        kind="httproute" if settings.WORKLOAD_ROUTE == "httproute" else "ingress",
        gateway_name=settings.WORKLOAD_GATEWAY_NAME,
        gateway_namespace=settings.WORKLOAD_GATEWAY_NAMESPACE,
        gateway_section=settings.WORKLOAD_GATEWAY_SECTION,
        portal_service_host=portal.hostname or "",
        portal_service_port=portal.port or (443 if portal.scheme == "https" else 80),
    )


def workload_notebook_token(gpu_request: GpuRequest) -> str | None:
    """The Jupyter token a notebook is started with (None for services and jobs)."""
    return notebook_token(gpu_request.pk) if gpu_request.kind == WorkloadKind.NOTEBOOK else None
