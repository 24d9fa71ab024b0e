"""Who may open a notebook or service, where it is served, and what sync saw of its pods.

The workload is served at `WORKLOAD_BASE_URL` + `<request id>/`, behind the portal's own
sign-in: the proxy in front of it asks the portal (`/auth/workloads/<id>/`) before every call.
Those who may open it are those who may see the request (`visible_to`): its owner, the team's
lead and platform admins.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

from scheduling.choices import RequestStatus, WorkloadKind
from scheduling.models import Allocation, GpuRequest

CONNECTABLE_KINDS = (WorkloadKind.NOTEBOOK, WorkloadKind.SERVICE)


def workload_path(request_id: int) -> str:
    """The path a request's workload is served under, e.g. `/w/812/`."""
    return f"{urlsplit(settings.WORKLOAD_BASE_URL).path}{request_id}/"


def connect_url(gpu_request: GpuRequest) -> str | None:
    """Where to open a running notebook or service (relative when `WORKLOAD_BASE_URL` is a
    path on the portal's own host); None for jobs and for work that is not running."""
    if gpu_request.kind not in CONNECTABLE_KINDS or gpu_request.status != RequestStatus.RUNNING:
        return None
    return f"{settings.WORKLOAD_BASE_URL}{gpu_request.pk}/"


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


def current_allocation(gpu_request: GpuRequest) -> Allocation | None:
    """The allocation of the request's current attempt: from `observed_allocations` when the
    view prefetched it, else one query."""
    prefetched = getattr(gpu_request, "observed_allocations", None)
    if prefetched is not None:
        return next((a for a in prefetched if a.attempt == gpu_request.attempt), None)
    if not gpu_request.attempt:
        return None
    return Allocation.objects.filter(request=gpu_request, attempt=gpu_request.attempt).first()
