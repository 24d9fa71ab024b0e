"""Reading a request's logs and events: from the cluster, and the portal's own audit trail.

The web tier holds no cluster credentials and never loads the Kubernetes client
(docs/security.md). With `CLUSTER_BACKEND=kubernetes` a read is therefore a short task: the web
queues it, the worker reads `pods/log` or `events` and leaves the answer in the shared cache
under a one-time key, and the web waits for it (`WORKLOAD_LOG_WAIT_SECONDS`). The simulated
backend is a database read, done in place.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict
from datetime import datetime
from typing import Any

from celery import current_app
from django.conf import settings
from django.core.cache import cache
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from runtime.cluster.base import ClusterBackend, ClusterError
from runtime.selectors.workloads import LIVE_STATUSES
from runtime.services.execution import attempt_cluster, backend_for, cluster_backend
from scheduling.models import GpuRequest
from tenants.models import AuditEvent

READ_WORKLOAD_LOGS = "runtime.tasks.read_workload_logs"
LIST_WORKLOAD_EVENTS = "runtime.tasks.list_workload_events"
MAX_TAIL = 5000
REPLY_SECONDS = 60


class InspectUnavailable(Exception):
    """The cluster could not be read now (worker busy or down, API server unreachable)."""


# What the worker runs ----------------------------------------------------------------------


def _backend(request_id: int, attempt: int) -> ClusterBackend:
    """The backend of the cluster the attempt runs on."""
    cluster = attempt_cluster(request_id, attempt)
    return cluster_backend() if cluster is None or cluster.is_local else backend_for(cluster)


def collect_logs(
    *, request_id: int, attempt: int, tail: int, since: str | None = None
) -> list[dict[str, Any]]:
    """The attempt's log lines as plain data (`pod`, `text`, `at` in ISO 8601)."""
    gpu_request = GpuRequest.objects.select_related("project").get(pk=request_id)
    lines = _backend(request_id, attempt).read_logs(
        gpu_request.project.namespace,
        str(request_id),
        attempt,
        tail=tail,
        since=parse_datetime(since) if since else None,
    )
    return [
        {"pod": line.pod, "text": line.text, "at": line.at.isoformat() if line.at else None}
        for line in lines
    ]


def collect_events(*, request_id: int, attempt: int) -> list[dict[str, Any]]:
    """The cluster's events about the attempt as plain data."""
    gpu_request = GpuRequest.objects.select_related("project").get(pk=request_id)
    backend = _backend(request_id, attempt)
    events = backend.list_events(gpu_request.project.namespace, str(request_id), attempt)
    return [{**asdict(event), "at": event.at.isoformat() if event.at else None} for event in events]


def answer(reply_key: str, produce: Any) -> None:
    """Run `produce` and leave its result (or the cluster's refusal) under `reply_key`."""
    try:
        value: dict[str, Any] = {"result": produce()}
    except ClusterError as error:
        value = {"error": error.message}
    except GpuRequest.DoesNotExist:
        value = {"result": []}
    cache.set(reply_key, value, REPLY_SECONDS)


# What the web calls ------------------------------------------------------------------------


def _through_worker(task_name: str, **kwargs: Any) -> list[dict[str, Any]]:
    reply_key = f"runtime:inspect:{uuid.uuid4().hex}"
    wait = settings.WORKLOAD_LOG_WAIT_SECONDS
    try:
        current_app.signature(task_name, args=(reply_key,), kwargs=kwargs).apply_async(expires=wait)
    except Exception as error:
        raise InspectUnavailable(f"The task queue is unreachable: {error}") from error
    deadline = time.monotonic() + wait
    while True:
        value = cache.get(reply_key)
        if value is not None:
            cache.delete(reply_key)
            if "error" in value:
                raise InspectUnavailable(f"The cluster refused: {value['error']}")
            result: list[dict[str, Any]] = value["result"]
            return result
        if time.monotonic() >= deadline:
            raise InspectUnavailable(f"The worker did not answer within {wait:g} s.")
        time.sleep(0.05)


def _read(task_name: str, collect: Any, **kwargs: Any) -> list[dict[str, Any]]:
    if settings.CLUSTER_BACKEND == "kubernetes":
        return _through_worker(task_name, **kwargs)
    try:
        result: list[dict[str, Any]] = collect(**kwargs)
    except ClusterError as error:
        raise InspectUnavailable(error.message) from error
    return result


def log_lines(
    gpu_request: GpuRequest, *, tail: int, since: datetime | None = None
) -> list[dict[str, Any]]:
    """The last `tail` lines of the request's current attempt (none before its first launch)."""
    if gpu_request.attempt < 1:
        return []
    return _read(
        READ_WORKLOAD_LOGS,
        collect_logs,
        request_id=gpu_request.pk,
        attempt=gpu_request.attempt,
        tail=min(max(tail, 0), MAX_TAIL),
        since=since.isoformat() if since else None,
    )


def format_line(line: dict[str, Any], *, with_pod: bool) -> str:
    prefix = f"[{line['pod']}] " if with_pod else ""
    return f"{prefix}{line['text']}\n"


def follow_log(gpu_request: GpuRequest, *, tail: int) -> Iterator[str]:
    """The tail, then new lines as they come: asked again every `WORKLOAD_LOG_POLL_SECONDS`
    until the request stops being live or `WORKLOAD_LOG_FOLLOW_SECONDS` have passed."""
    lines = log_lines(gpu_request, tail=tail)
    pods = {line["pod"] for line in lines}
    for line in lines:
        yield format_line(line, with_pod=len(pods) > 1)
    last = parse_datetime(lines[-1]["at"]) if lines and lines[-1]["at"] else timezone.now()
    end = time.monotonic() + settings.WORKLOAD_LOG_FOLLOW_SECONDS
    while time.monotonic() < end:
        time.sleep(settings.WORKLOAD_LOG_POLL_SECONDS)
        gpu_request.refresh_from_db(fields=["status", "attempt"])
        try:
            fresh = log_lines(gpu_request, tail=MAX_TAIL, since=last)
        except InspectUnavailable as error:
            yield f"[portal] {error}\n"
            fresh = []
        for line in fresh:
            pods.add(line["pod"])
            yield format_line(line, with_pod=len(pods) > 1)
        if fresh and fresh[-1]["at"]:
            last = parse_datetime(fresh[-1]["at"]) or last
        if gpu_request.status not in LIVE_STATUSES:
            return


def request_events(gpu_request: GpuRequest) -> dict[str, Any]:
    """The cluster's events about the current attempt and the portal's audit events about the
    request, merged by time (oldest first). When the cluster cannot be read, the portal's events
    still come, with `cluster_error` saying why."""
    portal = [
        {
            "at": event.occurred_at.isoformat(),
            "source": "portal",
            "type": "Warning"
            if event.action.startswith(("request.failed", "reclaim"))
            else "Normal",
            "reason": event.action,
            "message": event.message,
            "object": f"request {gpu_request.pk}",
            "actor": event.actor.get_username() if event.actor else None,
            "count": 1,
        }
        for event in AuditEvent.objects.filter(
            target_type="GpuRequest", target_id=str(gpu_request.pk)
        ).select_related("actor")
    ]
    cluster: list[dict[str, Any]] = []
    error = None
    if gpu_request.attempt >= 1:
        try:
            raw = _read(
                LIST_WORKLOAD_EVENTS,
                collect_events,
                request_id=gpu_request.pk,
                attempt=gpu_request.attempt,
            )
        except InspectUnavailable as unavailable:
            error = str(unavailable)
            raw = []
        cluster = [
            {
                "at": event["at"],
                "source": "cluster",
                "type": event["type"],
                "reason": event["reason"],
                "message": event["message"],
                "object": f"{event['object_kind']}/{event['object_name']}",
                "actor": None,
                "count": event["count"],
            }
            for event in raw
        ]
    merged = sorted(
        [*portal, *cluster],
        key=lambda e: (parse_datetime(e["at"]) if e["at"] else None) or timezone.now(),
    )
    return {"results": merged, "cluster_error": error}
