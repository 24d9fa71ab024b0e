"""Reading a request's logs and events: from the cluster, and the portal's own audit trail.

The web tier holds no cluster credentials and never loads the Kubernetes client
(docs/security.md). With `CLUSTER_BACKEND=kubernetes` a read is therefore a short task: the web
queues it, the worker reads `pods/log` or `events` and leaves the answer in the shared cache
under a one-time key, and the web waits for it (`WORKLOAD_LOG_WAIT_SECONDS`). The simulated
backend is a database read, done in place.

A followed log (`follow_log`) is an async iterator: between its polls it waits on the event
loop of the ASGI server (portal/asgi.py), occupying no worker or thread and holding no
database connection, so followers do not stall the pages.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict
from datetime import datetime
from typing import Any

from asgiref.sync import sync_to_async
from celery import current_app
from django.conf import settings
from django.core.cache import cache
from django.db import connections
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from runtime.cluster.base import ClusterBackend, ClusterError
from runtime.selectors.workloads import LIVE_STATUSES
from runtime.services.execution import attempt_cluster, backend_for, cluster_backend
from runtime.services.streams import StreamSlot
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


def _queue(task_name: str, kwargs: dict[str, Any]) -> str:
    """Queue a read for the worker; the key its answer will be left under."""
    reply_key = f"runtime:inspect:{uuid.uuid4().hex}"
    wait = settings.WORKLOAD_LOG_WAIT_SECONDS
    try:
        current_app.signature(task_name, args=(reply_key,), kwargs=kwargs).apply_async(expires=wait)
    except Exception as error:
        raise InspectUnavailable(f"The task queue is unreachable: {error}") from error
    return reply_key


def _result(value: dict[str, Any]) -> list[dict[str, Any]]:
    if "error" in value:
        raise InspectUnavailable(f"The cluster refused: {value['error']}")
    result: list[dict[str, Any]] = value["result"]
    return result


def _no_answer() -> InspectUnavailable:
    return InspectUnavailable(
        f"The worker did not answer within {settings.WORKLOAD_LOG_WAIT_SECONDS:g} s."
    )


def _through_worker(task_name: str, **kwargs: Any) -> list[dict[str, Any]]:
    reply_key = _queue(task_name, kwargs)
    deadline = time.monotonic() + settings.WORKLOAD_LOG_WAIT_SECONDS
    while True:
        value = cache.get(reply_key)
        if value is not None:
            cache.delete(reply_key)
            return _result(value)
        if time.monotonic() >= deadline:
            raise _no_answer()
        time.sleep(0.05)


async def _through_worker_async(task_name: str, **kwargs: Any) -> list[dict[str, Any]]:
    """`_through_worker` for a stream: it waits for the answer on the event loop."""
    reply_key = await _released(_queue)(task_name, kwargs)
    deadline = time.monotonic() + settings.WORKLOAD_LOG_WAIT_SECONDS
    while True:
        value = await cache.aget(reply_key)
        if value is not None:
            await cache.adelete(reply_key)
            return _result(value)
        if time.monotonic() >= deadline:
            raise _no_answer()
        await asyncio.sleep(0.05)


def _collect(collect: Any, **kwargs: Any) -> list[dict[str, Any]]:
    try:
        result: list[dict[str, Any]] = collect(**kwargs)
    except ClusterError as error:
        raise InspectUnavailable(error.message) from error
    return result


def _read(task_name: str, collect: Any, **kwargs: Any) -> list[dict[str, Any]]:
    if settings.CLUSTER_BACKEND == "kubernetes":
        return _through_worker(task_name, **kwargs)
    return _collect(collect, **kwargs)


def _log_query(
    request_id: int, attempt: int, *, tail: int, since: datetime | None
) -> dict[str, Any]:
    return {
        "request_id": request_id,
        "attempt": attempt,
        "tail": min(max(tail, 0), MAX_TAIL),
        "since": since.isoformat() if since else None,
    }


def log_lines(
    gpu_request: GpuRequest, *, tail: int, since: datetime | None = None
) -> list[dict[str, Any]]:
    """The last `tail` lines of the request's current attempt (none before its first launch)."""
    if gpu_request.attempt < 1:
        return []
    query = _log_query(gpu_request.pk, gpu_request.attempt, tail=tail, since=since)
    return _read(READ_WORKLOAD_LOGS, collect_logs, **query)


def format_line(line: dict[str, Any], *, with_pod: bool) -> str:
    prefix = f"[{line['pod']}] " if with_pod else ""
    return f"{prefix}{line['text']}\n"


def _released(work: Callable[..., Any]) -> Callable[..., Any]:
    """`work` as a coroutine, run in the request's thread; the database connection it used is
    given back afterwards (to the web tier's pool: docs/operations.md, "Web tier"), so a
    stream holds none while it waits for its next poll."""

    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return work(*args, **kwargs)
        finally:
            for connection in connections.all(initialized_only=True):
                if not connection.in_atomic_block:  # never under an open transaction
                    connection.close_if_unusable_or_obsolete()

    return sync_to_async(run)


def _live_attempt(request_id: int) -> tuple[bool, int]:
    """Whether the request is still live, and its current attempt."""
    status, attempt = GpuRequest.objects.values_list("status", "attempt").get(pk=request_id)
    return status in LIVE_STATUSES, attempt


async def _new_lines(request_id: int, attempt: int, **query: Any) -> list[dict[str, Any]]:
    if attempt < 1:
        return []
    kwargs = _log_query(request_id, attempt, **query)
    if settings.CLUSTER_BACKEND == "kubernetes":
        return await _through_worker_async(READ_WORKLOAD_LOGS, **kwargs)
    result: list[dict[str, Any]] = await _released(_collect)(collect_logs, **kwargs)
    return result


async def follow_log(gpu_request: GpuRequest, *, tail: int, slot: StreamSlot) -> AsyncIterator[str]:
    """The tail, then new lines as they come: asked again every `WORKLOAD_LOG_POLL_SECONDS`
    until the request stops being live or `WORKLOAD_LOG_FOLLOW_SECONDS` have passed. The
    stream holds `slot` and gives it back when it ends, however it ends."""
    request_id, attempt = gpu_request.pk, gpu_request.attempt
    try:
        # The view's connection is not needed while the stream lasts.
        await _released(lambda: None)()
        pods: set[str] = set()
        last = timezone.now()
        query: dict[str, Any] = {"tail": tail, "since": None}
        end = time.monotonic() + settings.WORKLOAD_LOG_FOLLOW_SECONDS
        live = True
        while True:
            try:
                fresh = await _new_lines(request_id, attempt, **query)
            except InspectUnavailable as error:
                yield f"[portal] {error}\n"
                fresh = []
            pods.update(line["pod"] for line in fresh)
            for line in fresh:
                yield format_line(line, with_pod=len(pods) > 1)
            if fresh and fresh[-1]["at"]:
                last = parse_datetime(fresh[-1]["at"]) or last
            if not live or time.monotonic() >= end:
                return
            await asyncio.sleep(settings.WORKLOAD_LOG_POLL_SECONDS)
            await slot.renew()
            live, attempt = await _released(_live_attempt)(request_id)
            query = {"tail": MAX_TAIL, "since": last}
    finally:
        await slot.release()


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
