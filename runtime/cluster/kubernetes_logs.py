"""The kubernetes backend's logs and events of a workload: `pods/log` of each pod, merged by
time or followed, and the namespace's events about the attempt's objects."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

from runtime.cluster import pod_manifests
from runtime.cluster.base import ClusterError
from runtime.cluster.kubernetes_client import CLIENT_ERRORS, KubernetesApi
from runtime.cluster.names import workload_name
from runtime.cluster.reports import ClusterEvent, LogLine

log = logging.getLogger(__name__)


class KubernetesLogs(KubernetesApi):
    """What a workload's pods wrote and what the cluster recorded about them."""

    def read_logs(
        self,
        namespace: str,
        request_id: str,
        attempt: int,
        *,
        tail: int = 100,
        follow: bool = False,
        since: datetime | None = None,
    ) -> Iterator[LogLine]:
        """The main container's log of each pod of the attempt (`pods/log`, with timestamps),
        merged by time. A pod whose container has not started yet has no lines (the API answers
        400). `follow` streams the newest pod only, until the pod ends or the server has been
        silent for the client timeout."""
        pods = _newest_last(
            self._list_all(
                self.core.list_namespaced_pod,
                namespace,
                label_selector=pod_manifests.workload_selector(request_id, attempt),
            )
        )
        options: dict[str, Any] = {"container": pod_manifests.CONTAINER_NAME, "timestamps": True}
        if tail:
            options["tail_lines"] = tail
        if since is not None:
            elapsed = (datetime.now(UTC) - since).total_seconds()
            options["since_seconds"] = max(1, math.ceil(elapsed) + 1)
        lines: list[LogLine] = []
        for pod in pods:
            name = str(pod.metadata.name)
            try:
                text = self._call(self.core.read_namespaced_pod_log, name, namespace, **options)
            except ClusterError as exc:
                if exc.status in (400, 404):
                    continue  # not started yet, or gone meanwhile
                raise
            lines.extend(_log_line(name, raw) for raw in str(text or "").splitlines())
        if since is not None:
            lines = [line for line in lines if line.at is None or line.at > since]
        lines.sort(key=lambda line: line.at or datetime.min.replace(tzinfo=UTC))
        yield from lines[-tail:] if tail else lines
        if follow and pods:
            yield from self._follow_log(namespace, str(pods[-1].metadata.name))

    def _follow_log(self, namespace: str, pod: str) -> Iterator[LogLine]:
        response: Any = self._call(
            self.core.read_namespaced_pod_log,
            pod,
            namespace,
            container=pod_manifests.CONTAINER_NAME,
            timestamps=True,
            follow=True,
            since_seconds=1,
            _preload_content=False,
        )
        pending = b""
        try:
            for chunk in response.stream(4096):
                pending += chunk
                *complete, pending = pending.split(b"\n")
                for raw in complete:
                    yield _log_line(pod, raw.decode("utf-8", "replace"))
        except CLIENT_ERRORS as exc:
            log.info("log stream of %s/%s ended: %s", namespace, pod, exc)
        finally:
            response.release_conn()

    def list_events(self, namespace: str, request_id: str, attempt: int) -> list[ClusterEvent]:
        """Events of the namespace about the attempt's objects: its Job or Deployment (a
        resumed attempt's is an earlier attempt's), their ReplicaSets, rank Jobs and pods, all
        named after the workload."""
        name = workload_name(request_id, attempt)
        names = {name}
        deployment = self._find_deployment(namespace, request_id, attempt)
        if deployment is not None:
            names.add(str(deployment.metadata.name))
        events = []
        for event in self._list_all(self.core.list_namespaced_event, namespace):
            involved = event.involved_object
            obj_name = str(involved.name or "") if involved is not None else ""
            if not any(obj_name == n or obj_name.startswith(f"{n}-") for n in names):
                continue
            events.append(
                ClusterEvent(
                    at=event.last_timestamp
                    or event.event_time
                    or event.first_timestamp
                    or (event.metadata.creation_timestamp if event.metadata else None),
                    type=str(event.type or "Normal"),
                    reason=str(event.reason or ""),
                    message=str(event.message or ""),
                    object_kind=str(involved.kind or ""),
                    object_name=obj_name,
                    count=int(event.count or 1),
                )
            )
        events.sort(key=lambda e: e.at or datetime.min.replace(tzinfo=UTC))
        return events


def _newest_last(pods: Sequence[Any]) -> list[Any]:
    def created(pod: Any) -> str:
        stamp = pod.metadata.creation_timestamp if pod.metadata else None
        return stamp.isoformat() if stamp else ""

    return sorted(pods, key=lambda pod: (created(pod), str(pod.metadata.name)))


def _log_line(pod: str, raw: str) -> LogLine:
    """A `pods/log` line asked for with timestamps: RFC 3339 (nanoseconds), a space, the text."""
    stamp, _, text = raw.partition(" ")
    try:
        seconds, _, fraction = stamp.rstrip("Z").partition(".")
        at = datetime.fromisoformat(f"{seconds}.{(fraction or '0')[:6]}").replace(tzinfo=UTC)
    except ValueError:
        return LogLine(pod=pod, text=raw)
    return LogLine(pod=pod, text=text, at=at)
