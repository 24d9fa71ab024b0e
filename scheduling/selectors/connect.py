"""Who may open a notebook or service, where it is served, and what sync saw of its pods.

Each workload has an origin of its own: request 812 is served at
`WORKLOAD_SCHEME://812.WORKLOAD_DOMAIN/`, never on the portal's host, so the portal's cookies
never reach it. People open it through the portal (`/connect/812/`), which checks them and hands
the workload host a short-lived credential (`runtime/services/workload_access.py`). Those who
may open it are those who may see the request (`visible_to`): its owner, the team's lead and
platform admins.
"""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from django.urls import reverse

from scheduling.choices import RequestStatus, WorkloadKind
from scheduling.models import Allocation, GpuRequest

CONNECTABLE_KINDS = (WorkloadKind.NOTEBOOK, WorkloadKind.SERVICE)


def workload_host(request_id: int) -> str:
    """The host (and port, if WORKLOAD_DOMAIN has one) of a request's workload, e.g.
    `812.workloads.example.org`."""
    return f"{request_id}.{settings.WORKLOAD_DOMAIN}"


def workload_origin(request_id: int) -> str:
    """The origin a request's workload is served on, e.g. `https://812.workloads.example.org`."""
    return f"{settings.WORKLOAD_SCHEME}://{workload_host(request_id)}"


def request_id_of_host(host: str) -> int | None:
    """The request whose workload host `host` is (`812.workloads.example.org` → 812), else None."""
    domain_host = settings.WORKLOAD_DOMAIN.split(":")[0]
    match = re.fullmatch(rf"([1-9][0-9]{{0,17}})\.{re.escape(domain_host)}", host.split(":")[0])
    return int(match.group(1)) if match else None


def connect_url(gpu_request: GpuRequest) -> str | None:
    """Where to open a running notebook or service: the portal's `/connect/<id>/`, which checks
    the caller and sends the browser on to the workload's own host; None for jobs and for work
    that is not running."""
    if gpu_request.kind not in CONNECTABLE_KINDS or gpu_request.status != RequestStatus.RUNNING:
        return None
    return reverse("workload-connect", kwargs={"pk": gpu_request.pk})


def connectable_request(user: Any, request_id: int) -> GpuRequest | None:
    """The notebook or service `user` may open, or None (not theirs, not there, a job)."""
    if user is None or not user.is_authenticated:
        return None
    return (
        GpuRequest.objects.visible_to(user)
        .filter(pk=request_id, kind__in=CONNECTABLE_KINDS)
        .only("pk", "kind", "status", "owner_id", "team_id")
        .first()
    )


# A request in these states waits for a placement: an allocation of its attempt number is the
# earlier attempt's (it was preempted or requeued), not where it runs.
WAITING_AGAIN = frozenset({RequestStatus.APPROVED, RequestStatus.QUEUED})


def current_allocation(gpu_request: GpuRequest) -> Allocation | None:
    """The allocation of the request's current attempt: from `observed_allocations` when the
    view prefetched it, else one query. None while the request waits to be placed again: the
    node and pods of an earlier attempt are not where it is."""
    if gpu_request.status in WAITING_AGAIN:
        return None
    prefetched = getattr(gpu_request, "observed_allocations", None)
    if prefetched is not None:
        return next((a for a in prefetched if a.attempt == gpu_request.attempt), None)
    if not gpu_request.attempt:
        return None
    return Allocation.objects.filter(request=gpu_request, attempt=gpu_request.attempt).first()
