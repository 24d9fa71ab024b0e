"""Health and metrics endpoints for probes and Prometheus.

`/healthz` says the process is alive (no dependencies touched). `/readyz` checks the database,
the broker and the cluster. `/metrics` exposes the portal's figures, computed from the database
at scrape time. Neither of the last two is public: they answer a bearer token
(MONITORING_TOKEN) or a request from a loopback or private address.
"""

from __future__ import annotations

import hmac
import ipaddress
import math
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Count, F, Sum
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.http import require_GET
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from runtime.models import TaskFailureCount
from scheduling.choices import RequestStatus
from scheduling.models import Allocation, Cluster, GpuRequest, NodePool, Quota, SchedulerLease
from scheduling.selectors.activity import activity_gap
from scheduling.services.kueue_drift import kueue_checks
from tenants.models import AuditEvent

WAIT_BUCKETS = (60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600, 86400)
#: Window of admissions the admission-wait histogram covers (the fleet page uses the same).
ADMISSION_WINDOW_DAYS = 7


def _histogram(values: list[float]) -> list[tuple[str, float]]:
    buckets: list[tuple[str, float]] = [
        (str(b), sum(1 for v in values if v <= b)) for b in WAIT_BUCKETS
    ]
    buckets.append(("+Inf", len(values)))
    return buckets


def _allowed(request: HttpRequest) -> bool:
    token = settings.MONITORING_TOKEN
    header = request.headers.get("Authorization", "")
    if token and header.startswith("Bearer "):
        return hmac.compare_digest(header.removeprefix("Bearer "), token)
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    return address.is_loopback or address.is_private


def _denied() -> JsonResponse:
    body = {"error": {"code": "forbidden", "message": "Monitoring is internal.", "fields": {}}}
    return JsonResponse(body, status=403)


@require_GET
def healthz(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"status": "ok"})


@require_GET
def readyz(request: HttpRequest) -> HttpResponse:
    if not _allowed(request):
        return _denied()
    checks: dict[str, str] = {}
    try:
        # Raw SQL: a probe of the connection itself, independent of any table.
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        checks["database"] = "ok"
    except Exception as error:  # a probe reports, it does not raise
        checks["database"] = f"failed: {type(error).__name__}"
    try:
        from portal.celery import app

        with app.connection_for_write() as broker:
            broker.ensure_connection(max_retries=1, timeout=2)
        checks["broker"] = "ok"
    except Exception as error:
        checks["broker"] = f"failed: {type(error).__name__}"
    if settings.READYZ_CHECKS_CLUSTER:
        try:
            from runtime.services.execution import cluster_backend

            cluster_backend().get_workload("default", "readiness-probe", 1)
            checks["cluster"] = "ok"
        except Exception as error:
            checks["cluster"] = f"failed: {type(error).__name__}"
    ready = all(value == "ok" for value in checks.values())
    body: dict[str, Any] = {"ready": ready, "checks": checks}
    if checks["database"] == "ok":
        # Detail, not a failed check: the portal serves fine without GPU activity, but idle
        # reclaim pauses on the clusters listed here (docs/operations.md).
        signals = _activity_signals()
        if signals:
            body["gpu_activity"] = signals
    return JsonResponse(body, status=200 if ready else 503)


def _activity_signals() -> dict[str, str]:
    """Each real cluster's GPU activity signal: "ok", or since when and why it is missing."""
    now = timezone.now()
    out: dict[str, str] = {}
    for cluster in Cluster.objects.order_by("slug"):
        if not cluster.expects_activity_signal:
            continue
        gap = activity_gap(cluster, now=now)
        if gap is None:
            out[cluster.slug] = "ok"
            continue
        since = gap.since.isoformat() if gap.since else "never received"
        out[cluster.slug] = f"no signal since {since}: {gap.reason} Idle reclaim is paused."
    return out


class PortalCollector(Collector):
    """The portal's state, read from the database at scrape time."""

    def collect(self) -> Iterator[Any]:
        by_state = GaugeMetricFamily(
            "gpu_portal_requests", "GPU requests by state", labels=["state"]
        )
        counts = dict(
            GpuRequest.objects.values_list("status")
            .annotate(n=Count("id"))
            .values_list("status", "n")
        )
        for state in RequestStatus.values:
            by_state.add_metric([state], counts.get(state, 0))
        yield by_state

        depth = GaugeMetricFamily(
            "gpu_portal_queue_depth", "Queued requests per pool", labels=["pool"]
        )
        for pool, n in (
            GpuRequest.objects.filter(status=RequestStatus.QUEUED)
            .values_list("flavor__pool__slug")
            .annotate(n=Count("id"))
            .values_list("flavor__pool__slug", "n")
        ):
            depth.add_metric([pool], n)
        yield depth

        now = timezone.now()
        wait = HistogramMetricFamily(
            "gpu_portal_queue_wait_seconds",
            "How long queued requests have waited so far, per pool",
            labels=["pool"],
        )
        waits: dict[str, list[float]] = {}
        for pool, queued_at in GpuRequest.objects.filter(
            status=RequestStatus.QUEUED, queued_at__isnull=False
        ).values_list("flavor__pool__slug", "queued_at"):
            waits.setdefault(pool, []).append((now - queued_at).total_seconds())
        for pool, values in waits.items():
            wait.add_metric([pool], _histogram(values), sum(values))
        yield wait

        yield from self._lifecycle_isolation(now)

        allocated = GaugeMetricFamily(
            "gpu_portal_team_allocated_units",
            "Units of a flavor allocated to a team now",
            labels=["team", "flavor"],
        )
        for team, flavor, units in (
            Allocation.objects.active()
            .values_list("request__team__slug", "request__flavor__slug")
            .annotate(units=Sum("request__gpu_count"))
            .values_list("request__team__slug", "request__flavor__slug", "units")
        ):
            allocated.add_metric([team, flavor], units or 0)
        yield allocated

        quota = GaugeMetricFamily(
            "gpu_portal_team_quota_units",
            "A team's quota of a flavor",
            labels=["team", "flavor", "kind"],
        )
        for team, flavor, guaranteed, limit in Quota.objects.filter(
            project__isnull=True
        ).values_list("team__slug", "flavor__slug", "guaranteed", "limit"):
            quota.add_metric([team, flavor, "guaranteed"], guaranteed)
            quota.add_metric([team, flavor, "limit"], limit)
        yield quota

        reclaims = GaugeMetricFamily(
            "gpu_portal_reclamations", "Reclamations and warnings by reason", labels=["reason"]
        )
        for action, n in (
            AuditEvent.objects.filter(action__startswith="reclaim.")
            .values_list("action")
            .annotate(n=Count("id"))
            .values_list("action", "n")
        ):
            reclaims.add_metric([action.removeprefix("reclaim.")], n)
        # Preemption takes capacity back too (and requeues the work): one series with the rest.
        reclaims.add_metric(
            ["preempted"], AuditEvent.objects.filter(action="request.preempted").count()
        )
        yield reclaims

        failures = GaugeMetricFamily(
            "gpu_portal_failed_requests", "Requests that ended failed, by reason", labels=[]
        )
        failures.add_metric([], counts.get(RequestStatus.FAILED, 0))
        yield failures

        task_failures = GaugeMetricFamily(
            "gpu_portal_task_failures", "Celery tasks that failed for good", labels=["task"]
        )
        for name, n in TaskFailureCount.objects.values_list("task_name", "failures"):
            task_failures.add_metric([name], n)
        yield task_failures

        cycle = GaugeMetricFamily(
            "gpu_portal_scheduling_cycle_seconds", "Duration of the last scheduling cycle"
        )
        lease = SchedulerLease.objects.filter(name="scheduling-cycle").first()
        cycle.add_metric([], lease.last_cycle_seconds if lease else 0.0)
        yield cycle

        signal_age = GaugeMetricFamily(
            "gpu_portal_metrics_signal_age_seconds",
            "Seconds since GPU activity last came from a real cluster's Prometheus (+Inf: never); "
            "idle reclaim pauses for the cluster's work past ACTIVITY_SIGNAL_MAX_AGE_SECONDS",
            labels=["cluster"],
        )
        for cluster in Cluster.objects.order_by("slug"):
            if cluster.expects_activity_signal:  # the simulated cluster makes its own figures
                last = cluster.activity_signal_at
                age = (now - last).total_seconds() if last else math.inf
                signal_age.add_metric([cluster.slug], age)
        yield signal_age

        checks = [(k.slug, k.check) for k in kueue_checks() if k.check is not None]
        if checks:
            drift = GaugeMetricFamily(
                "gpu_portal_kueue_policy_drift_objects",
                "Kueue objects that differed from the portal's policy at the last check",
                labels=["cluster"],
            )
            checked = GaugeMetricFamily(
                "gpu_portal_kueue_policy_checked_timestamp_seconds",
                "When the Kueue objects were last checked against the policy",
                labels=["cluster"],
            )
            for slug, check in checks:
                drift.add_metric([slug], len(check.differences))
                checked.add_metric([slug], check.checked_at.timestamp())
            yield drift
            yield checked

    def _lifecycle_isolation(self, now: datetime) -> Iterator[Any]:
        """Short-request reserves, and queue-to-admission waits of short vs long requests.

        A request is short in a pool when its max runtime is at most the pool's threshold;
        comparing the two histograms shows whether the reserve keeps short work moving.
        """
        reserve = GaugeMetricFamily(
            "gpu_portal_pool_short_reserve_ratio",
            "Share of a pool's GPUs kept free for short requests",
            labels=["pool"],
        )
        for slug, fraction in NodePool.objects.values_list("slug", "short_reserve_fraction"):
            reserve.add_metric([slug], fraction)
        yield reserve

        admission = HistogramMetricFamily(
            "gpu_portal_admission_wait_seconds",
            f"Queue-to-admission wait of work admitted in the last {ADMISSION_WINDOW_DAYS} "
            "days, per pool and request length (short: max runtime within the pool's threshold)",
            labels=["pool", "length"],
        )
        waits: dict[tuple[str, str], list[float]] = {}
        for pool, admitted, queued, runtime, threshold in (
            Allocation.objects.filter(
                admitted_at__gt=now - timedelta(days=ADMISSION_WINDOW_DAYS),
                request__queued_at__isnull=False,
                admitted_at__gte=F("request__queued_at"),
            )
            .order_by()
            .values_list(
                "pool__slug",
                "admitted_at",
                "request__queued_at",
                "request__max_runtime_seconds",
                "pool__short_max_runtime_seconds",
            )
        ):
            length = "short" if runtime <= threshold else "long"
            waits.setdefault((pool, length), []).append((admitted - queued).total_seconds())
        for (pool, length), values in sorted(waits.items()):
            admission.add_metric([pool, length], _histogram(values), sum(values))
        yield admission


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    if not _allowed(request):
        return _denied()
    registry = CollectorRegistry()
    registry.register(PortalCollector())
    return HttpResponse(generate_latest(registry), content_type="text/plain; version=0.0.4")
