"""GPU activity per allocation, from a metrics source, stored as bounded sample series.

Two sources: Prometheus (production: DCGM exporter's profiling metric, falling back to the
device utilisation metric; HAMi's per-container metrics for vGPU pools) and the simulated
cluster's own figures. Samples are written at most once per SAMPLE_INTERVAL per allocation
and dropped after SAMPLE_RETENTION, so the table's size is bounded by the running work.
"""

from __future__ import annotations

import json
import logging
import re
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol

from django.conf import settings
from django.utils import timezone

from runtime.models import SimulatedWorkload
from scheduling.choices import RequestStatus, SharingMode
from scheduling.models import Allocation, UtilisationSample

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


class PrometheusMetrics:
    """Queries a Prometheus server's HTTP API (instant queries) for the workloads' pods."""

    DCGM_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"  # ratio 0-1, profiling metrics
    DCGM_UTIL = "DCGM_FI_DEV_GPU_UTIL"  # percent, always present
    DCGM_MEMORY = "DCGM_FI_DEV_FB_USED"  # MiB
    HAMI_UTIL = "hami_container_device_utilization_ratio"  # HAMi vGPU, percent
    HAMI_MEMORY = "hami_container_device_memory_usage"  # HAMi vGPU, bytes

    def __init__(self, url: str, *, timeout_seconds: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout_seconds

    def query(self, promql: str) -> list[tuple[dict[str, str], float]]:
        address = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(address, timeout=self.timeout) as response:  # noqa: S310
            body = json.loads(response.read())
        if body.get("status") != "success":
            raise ValueError(f"Prometheus refused the query: {body.get('error', body)}")
        return [(item["metric"], float(item["value"][1])) for item in body["data"]["result"]]

    def _by_pod(
        self, metric: str, pod_label: str, ns_label: str, namespaces: set[str], scale: float
    ) -> dict[tuple[str, str], float]:
        matcher = "|".join(sorted(namespaces))
        promql = (
            f'avg by ({ns_label}, {pod_label}) ({metric}{{{ns_label}=~"{matcher}",'
            f'{pod_label}=~"gpr-.*"}})'
        )
        return {
            (labels.get(ns_label, ""), labels.get(pod_label, "")): value * scale
            for labels, value in self.query(promql)
        }

    def readings(self, allocations: Sequence[Allocation]) -> dict[int, Reading]:
        namespaces = {a.request.project.namespace for a in allocations}
        namespaces = {n for n in namespaces if _SAFE_LABEL_VALUE.match(n)}
        if not namespaces:
            return {}
        activity = self._by_pod(self.DCGM_ACTIVE, "pod", "namespace", namespaces, 100.0)
        if not activity:
            activity = self._by_pod(self.DCGM_UTIL, "pod", "namespace", namespaces, 1.0)
        memory = self._by_pod(self.DCGM_MEMORY, "pod", "namespace", namespaces, 1.0)
        if any(a.pool.sharing_mode == SharingMode.VGPU for a in allocations):
            activity.update(
                self._by_pod(self.HAMI_UTIL, "podname", "podnamespace", namespaces, 1.0)
            )
            memory.update(
                self._by_pod(self.HAMI_MEMORY, "podname", "podnamespace", namespaces, 1 / 1048576)
            )
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


def metrics_source() -> MetricsSource:
    if settings.PROMETHEUS_URL:
        return PrometheusMetrics(settings.PROMETHEUS_URL)
    return SimulatedMetrics()


def record_samples(*, source: MetricsSource | None = None) -> int:
    """Store one sample per running allocation (at most one per interval); prune old ones."""
    source = source or metrics_source()
    now = timezone.now()
    running = list(
        Allocation.objects.active()
        .filter(request__status=RequestStatus.RUNNING)
        .select_related("request", "request__flavor", "request__project__team", "pool")
    )
    readings = source.readings(running) if running else {}
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
