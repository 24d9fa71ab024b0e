"""GPU activity per allocation, from a metrics source, stored as bounded sample series.

A real cluster's activity comes from its Prometheus (the cluster's own address, else
PROMETHEUS_URL): the DCGM exporter's metrics under the label and metric names the settings
give, and HAMi's per-container metrics for vGPU pools. Only the simulated cluster reports its
own figures; a real cluster never falls back to them. A poll that gets no activity from a real
cluster (no address, unreachable, an error, no GPU series at all) opens a gap on it, audited
once (`monitoring.signal_lost`) and closed once (`monitoring.signal_restored`); meanwhile idle
reclaim pauses for its work (scheduling/selectors/activity.py). Samples are written at most once
per SAMPLE_INTERVAL per allocation and dropped after SAMPLE_RETENTION, so the table's size is
bounded by the running work.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

import requests
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from runtime.models import SimulatedWorkload
from scheduling.choices import RequestStatus, SharingMode
from scheduling.models import Allocation, Cluster, Node, UtilisationSample
from tenants.services.organisation import record_audit_event

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Reading:
    activity_percent: float
    memory_used_mib: int | None = None


class MetricsSource(Protocol):
    def readings(self, allocations: Sequence[Allocation]) -> dict[int, Reading]:
        """Current GPU activity per allocation id; allocations without data are left out."""
        ...


class SimulatedMetrics:
    """The simulated cluster's utilisation: busy work 55-98 %, idle work 0-3 %."""

    def readings(self, allocations: Sequence[Allocation]) -> dict[int, Reading]:
        keys = {(str(a.request_id), a.attempt): a for a in allocations}
        out: dict[int, Reading] = {}
        now = timezone.now()
        workloads = SimulatedWorkload.objects.filter(
            request_key__in=[k[0] for k in keys], starts_at__lte=now, ends_at__gt=now
        )
        for workload in workloads:
            allocation = keys.get((workload.request_key, workload.attempt))
            if allocation is None:
                continue
            memory = allocation.request.gpu_memory_mib or allocation.request.flavor.gpu_memory_mib
            share = 0.85 if workload.utilisation_percent > 10 else 0.05
            out[allocation.pk] = Reading(float(workload.utilisation_percent), int(memory * share))
        return out


_SAFE_LABEL_VALUE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")

#: Where each layout keeps the workload pod's name and namespace (docs/operations.md).
LABEL_LAYOUTS = {
    # The exporter's own labels, kept: the GPU operator's ServiceMonitor with honorLabels: true.
    "gpu-operator": ("pod", "namespace"),
    # Scraped with honorLabels: false (a standalone dcgm-exporter's ServiceMonitor by default),
    # Prometheus puts the exporter pod's own names in pod/namespace and renames the workload's.
    "dcgm-exporter": ("exported_pod", "exported_namespace"),
}
#: DCGM's MIG instance label: series of two instances of one card are two devices.
MIG_INSTANCE_LABEL = "GPU_I_ID"


@dataclass(frozen=True, slots=True)
class PrometheusLabels:
    """The label names under which DCGM exporter series say which pod and which GPU."""

    pod: str
    namespace: str
    hostname: str
    gpu_uuid: str
    gpu_model: str

    @classmethod
    def from_settings(cls) -> PrometheusLabels:
        pod, namespace = LABEL_LAYOUTS[settings.PROMETHEUS_LABEL_LAYOUT]
        return cls(
            pod=settings.PROMETHEUS_POD_LABEL or pod,
            namespace=settings.PROMETHEUS_NAMESPACE_LABEL or namespace,
            hostname=settings.PROMETHEUS_HOSTNAME_LABEL,
            gpu_uuid=settings.PROMETHEUS_GPU_UUID_LABEL,
            gpu_model=settings.PROMETHEUS_GPU_MODEL_LABEL,
        )


@dataclass(frozen=True, slots=True)
class Census:
    """The GPUs a Prometheus reports the utilisation metric for: count, hosts and models."""

    gpus: int
    hosts: tuple[str, ...]
    models: tuple[str, ...]

    def describe(self) -> str:
        models = f" ({', '.join(self.models)})" if self.models else ""
        gpus, hosts = self.gpus, len(self.hosts)
        return f"{gpus} GPU{'s' * (gpus != 1)} on {hosts} host{'s' * (hosts != 1)}{models}"


class PrometheusError(Exception):
    """Prometheus could not be read: unreachable, an error answer, or not Prometheus at all."""


class PrometheusMetrics:
    """Reads a Prometheus server's HTTP API (instant queries) for the workloads' pods."""

    HAMI_UTIL = "hami_container_device_utilization_ratio"  # HAMi vGPU, percent
    HAMI_MEMORY = "hami_container_device_memory_usage"  # HAMi vGPU, bytes

    def __init__(
        self,
        url: str,
        *,
        labels: PrometheusLabels | None = None,
        timeout_seconds: float | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.labels = labels or PrometheusLabels.from_settings()
        self.timeout = timeout_seconds or settings.PROMETHEUS_TIMEOUT_SECONDS

    def query(self, promql: str) -> list[tuple[dict[str, str], float]]:
        """An instant query's vector as (labels, value); NaN and infinite values left out."""
        try:
            response = requests.get(
                f"{self.url}/api/v1/query", params={"query": promql}, timeout=self.timeout
            )
        except requests.RequestException as error:
            raise PrometheusError(f"unreachable ({type(error).__name__})") from error
        try:
            body: Any = response.json()
        except ValueError as error:
            raise PrometheusError(
                f"HTTP {response.status_code}, not a Prometheus answer"
            ) from error
        if not isinstance(body, dict) or body.get("status") != "success":
            detail = body.get("error", "") if isinstance(body, dict) else ""
            raise PrometheusError(f"HTTP {response.status_code}, query refused: {detail}"[:300])
        data = body.get("data")
        if not isinstance(data, dict) or data.get("resultType") != "vector":
            kind = data.get("resultType") if isinstance(data, dict) else None
            raise PrometheusError(f"HTTP {response.status_code}, not a vector ({kind!r})")
        out: list[tuple[dict[str, str], float]] = []
        try:
            for item in data.get("result", []):
                value = float(item["value"][1])
                if math.isfinite(value):
                    out.append((dict(item["metric"]), value))
        except (KeyError, IndexError, TypeError, ValueError) as error:
            raise PrometheusError(f"a sample that does not read ({error!r})"[:300]) from error
        return out

    def census(self) -> Census:
        """The GPUs (one per UUID) that report the utilisation metric, their hosts and models;
        where none does, those reporting the profiling metric (MIG cards report only that)."""
        host, uuid, model = self.labels.hostname, self.labels.gpu_uuid, self.labels.gpu_model
        answer: list[tuple[dict[str, str], float]] = []
        for metric in (
            settings.PROMETHEUS_UTILISATION_METRIC,
            settings.PROMETHEUS_PROFILING_METRIC,
        ):
            if metric and not answer:
                answer = self.query(f"group by ({host}, {uuid}, {model}) ({metric})")
        return Census(
            gpus=len({labels.get(uuid, "") for labels, _ in answer}),
            hosts=tuple(sorted({labels.get(host, "") for labels, _ in answer} - {""})),
            models=tuple(sorted({labels.get(model, "") for labels, _ in answer} - {""})),
        )

    def _series(
        self, metric: str, namespaces: set[str], *, pod: str, namespace: str
    ) -> list[tuple[dict[str, str], float]]:
        """The portal's pods' series of `metric` as Prometheus holds them (every label)."""
        matcher = "|".join(sorted(namespaces))
        return self.query(f'{metric}{{{namespace}=~"{matcher}",{pod}=~"gpr-.*"}}')

    def _by_pod(
        self, metric: str, namespaces: set[str], scale: float, *, combine: str
    ) -> dict[tuple[str, str], float]:
        """`metric` per (namespace, pod): each GPU (UUID and MIG instance) counted once however
        often it was scraped, then the pod's GPUs averaged (`avg`) or added up (`sum`)."""
        pod, ns, uuid = self.labels.pod, self.labels.namespace, self.labels.gpu_uuid
        devices: dict[tuple[str, str, str, str], float] = {}
        for labels, value in self._series(metric, namespaces, pod=pod, namespace=ns):
            key = (
                labels.get(ns, ""),
                labels.get(pod, ""),
                labels.get(uuid, ""),
                labels.get(MIG_INSTANCE_LABEL, ""),
            )
            devices[key] = max(devices.get(key, value), value)
        per_pod: dict[tuple[str, str], list[float]] = {}
        for (namespace, name, _, _), value in devices.items():
            per_pod.setdefault((namespace, name), []).append(value * scale)
        if combine == "sum":
            return {key: sum(values) for key, values in per_pod.items()}
        return {key: sum(values) / len(values) for key, values in per_pod.items()}

    def _hami_by_pod(
        self, metric: str, namespaces: set[str], scale: float
    ) -> dict[tuple[str, str], float]:
        per_pod: dict[tuple[str, str], list[float]] = {}
        for labels, value in self._series(
            metric, namespaces, pod="podname", namespace="podnamespace"
        ):
            key = (labels.get("podnamespace", ""), labels.get("podname", ""))
            per_pod.setdefault(key, []).append(value * scale)
        return {key: sum(values) / len(values) for key, values in per_pod.items()}

    def readings(self, allocations: Sequence[Allocation]) -> dict[int, Reading]:
        namespaces = {a.request.project.namespace for a in allocations}
        namespaces = {n for n in namespaces if _SAFE_LABEL_VALUE.match(n)}
        if not namespaces:
            return {}
        activity: dict[tuple[str, str], float] = {}
        if settings.PROMETHEUS_PROFILING_METRIC:  # a ratio 0-1 where profiling is on
            activity = self._by_pod(
                settings.PROMETHEUS_PROFILING_METRIC, namespaces, 100.0, combine="avg"
            )
        if not activity:
            activity = self._by_pod(
                settings.PROMETHEUS_UTILISATION_METRIC, namespaces, 1.0, combine="avg"
            )
        memory: dict[tuple[str, str], float] = {}
        if settings.PROMETHEUS_MEMORY_METRIC:
            memory = self._by_pod(settings.PROMETHEUS_MEMORY_METRIC, namespaces, 1.0, combine="sum")
        if any(a.pool.sharing_mode == SharingMode.VGPU for a in allocations):
            activity.update(self._hami_by_pod(self.HAMI_UTIL, namespaces, 1.0))
            memory.update(self._hami_by_pod(self.HAMI_MEMORY, namespaces, 1 / 1048576))
        out: dict[int, Reading] = {}
        for allocation in allocations:
            # Pods are named after their Job or Deployment plus "-<hash>"; a resumed attempt runs
            # in the Deployment of the attempt it took over, which workload_name records.
            name = allocation.workload_name or f"gpr-{allocation.request_id}-a{allocation.attempt}"
            prefix = f"{name}-"
            namespace = allocation.request.project.namespace
            values = [
                v for (ns, pod), v in activity.items() if ns == namespace and pod.startswith(prefix)
            ]
            if values:
                used = [
                    v
                    for (ns, pod), v in memory.items()
                    if ns == namespace and pod.startswith(prefix)
                ]
                out[allocation.pk] = Reading(
                    sum(values) / len(values), int(sum(used)) if used else None
                )
        return out


@dataclass(frozen=True, slots=True)
class Poll:
    """One poll of a real cluster: its readings, and why there are none ("" when the signal
    came), with what its Prometheus reports of its GPUs."""

    readings: dict[int, Reading]
    gap_reason: str = ""
    census: str = ""


def poll_cluster(cluster: Cluster, allocations: Sequence[Allocation]) -> Poll:
    """A real cluster's readings from its Prometheus. The signal came when Prometheus answered
    and reports GPUs (or the cluster has no GPU nodes yet); anything else is a gap."""
    url = cluster.effective_prometheus_url
    if not url:
        return Poll(
            {}, "No Prometheus address: set the cluster's Prometheus URL or PROMETHEUS_URL."
        )
    source = PrometheusMetrics(url)
    try:
        census = source.census()
        if census.gpus == 0 and Node.objects.filter(pool__cluster=cluster).exists():
            metrics = " or ".join(
                m
                for m in (
                    settings.PROMETHEUS_UTILISATION_METRIC,
                    settings.PROMETHEUS_PROFILING_METRIC,
                )
                if m
            )
            return Poll(
                {},
                f"Prometheus at {url} holds no {metrics} series: is the DCGM exporter running "
                "and scraped, and are the metric names right?",
            )
        readings = source.readings(allocations) if allocations else {}
    except PrometheusError as error:
        return Poll({}, f"Prometheus at {url}: {error}.")
    return Poll(readings, census=census.describe())


def record_signal(cluster: Cluster, poll: Poll, *, now: datetime) -> None:
    """Note one poll of a real cluster's GPU activity: the signal came or not. The first poll
    without it opens a gap and the first with it closes it, each with one audit event
    (compare-and-set: two workers polling at once record it once)."""
    max_age = timedelta(seconds=settings.ACTIVITY_SIGNAL_MAX_AGE_SECONDS)
    gap_reason = poll.gap_reason
    with transaction.atomic():
        if gap_reason:
            opened = Cluster.objects.filter(pk=cluster.pk, activity_gap_since__isnull=True).update(
                activity_gap_since=cluster.activity_signal_at or now,
                activity_gap_reason=gap_reason[:1000],
                activity_signal_since=None,
            )
            if not opened:  # the gap goes on: keep its latest reason
                Cluster.objects.filter(pk=cluster.pk).update(activity_gap_reason=gap_reason[:1000])
                return
            log.warning("cluster %s: no GPU activity: %s", cluster.slug, gap_reason)
            record_audit_event(
                actor=None,
                action="monitoring.signal_lost",
                target=cluster,
                message=f"No GPU activity from Prometheus for cluster {cluster}: {gap_reason} "
                "Idle reclaim is paused for its work.",
                data={
                    "cluster": cluster.slug,
                    "reason": gap_reason,
                    "last_signal_at": _iso(cluster.activity_signal_at),
                },
            )
            return
        closed = Cluster.objects.filter(pk=cluster.pk, activity_gap_since__isnull=False).update(
            activity_gap_since=None,
            activity_gap_reason="",
            activity_signal_at=now,
            activity_signal_since=now,
            activity_census=poll.census,
        )
        if closed:
            gap_since = cluster.activity_gap_since or now
            record_audit_event(
                actor=None,
                action="monitoring.signal_restored",
                target=cluster,
                message=f"GPU activity from Prometheus is back for cluster {cluster} "
                f"({poll.census}); idle reclaim resumes, counting idleness from now.",
                data={
                    "cluster": cluster.slug,
                    "census": poll.census,
                    "gap_since": _iso(cluster.activity_gap_since),
                    "gap_seconds": round((now - gap_since).total_seconds(), 1),
                },
            )
            return
        # A signal that was silent longer than the max age (no poll ran) starts a new run.
        unbroken = (
            cluster.activity_signal_since is not None
            and cluster.activity_signal_at is not None
            and cluster.activity_signal_at >= now - max_age
        )
        Cluster.objects.filter(pk=cluster.pk).update(
            activity_signal_at=now,
            activity_signal_since=cluster.activity_signal_since if unbroken else now,
            activity_census=poll.census,
        )


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


def record_samples(*, now: datetime | None = None) -> int:
    """Store one sample per running allocation (at most one per interval); prune old ones.

    Cluster by cluster: the simulated cluster's own figures, or a real cluster's Prometheus,
    whose signal (or gap) is recorded on the cluster. Returns how many samples were stored.
    """
    now = now or timezone.now()
    running = list(
        Allocation.objects.active()
        .filter(request__status=RequestStatus.RUNNING)
        .select_related("request", "request__flavor", "request__project__team", "pool")
    )
    readings: dict[int, Reading] = {}
    for cluster in Cluster.objects.order_by("pk"):
        allocations = [a for a in running if a.pool.cluster_id == cluster.pk]
        if not cluster.expects_activity_signal:
            readings.update(SimulatedMetrics().readings(allocations) if allocations else {})
            continue
        poll = poll_cluster(cluster, allocations)
        readings.update(poll.readings)
        record_signal(cluster, poll, now=now)
    interval = timedelta(seconds=settings.SAMPLE_INTERVAL_SECONDS * 0.9)
    recent = set(
        UtilisationSample.objects.filter(
            allocation_id__in=list(readings), sampled_at__gt=now - interval
        ).values_list("allocation_id", flat=True)
    )
    UtilisationSample.objects.bulk_create(
        UtilisationSample(
            allocation_id=allocation_id,
            sampled_at=now,
            activity_percent=reading.activity_percent,
            memory_used_mib=reading.memory_used_mib,
        )
        for allocation_id, reading in readings.items()
        if allocation_id not in recent
    )
    cutoff = now - timedelta(seconds=settings.SAMPLE_RETENTION_SECONDS)
    UtilisationSample.objects.filter(sampled_at__lt=cutoff).delete()
    return len(readings) - len(recent & set(readings))
