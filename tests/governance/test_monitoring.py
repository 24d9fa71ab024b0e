"""Metrics sources, sample storage, /metrics and the probes."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from django.test import Client
from django.urls import reverse

from runtime.models import SimulatedWorkload
from runtime.services.monitoring import PrometheusError, PrometheusMetrics, record_samples
from scheduling.models import Allocation, UtilisationSample
from scripts.testbed.ports import free_port
from tests.governance.conftest import Runner
from tests.support.worker import use_broker

pytestmark = pytest.mark.django_db


def vector(samples: list[tuple[dict[str, str], float]]) -> dict[str, Any]:
    """A Prometheus instant-query answer, shaped as the HTTP API returns it."""
    return {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [{"metric": m, "value": [1764700000.0, str(v)]} for m, v in samples],
        },
    }


@pytest.fixture
def fake_prometheus() -> Iterator[tuple[str, dict[str, dict[str, Any]], list[str]]]:
    answers: dict[str, dict[str, Any]] = {}
    queries: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            query = parse_qs(urlparse(self.path).query)["query"][0]
            queries.append(query)
            metric = next((name for name in answers if name in query), None)
            body = answers[metric] if metric else vector([])
            payload = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", answers, queries
    server.shutdown()


def test_prometheus_source_reads_dcgm_profiling_activity(
    running: Runner, fake_prometheus: Any
) -> None:
    url, answers, queries = fake_prometheus
    request = running(minutes_ago=1)
    allocation = Allocation.objects.select_related("request__project__team", "pool").get(
        request=request
    )
    pod = f"gpr-{request.pk}-a1-x7k2p"
    ns = request.project.namespace
    answers["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] = vector([({"namespace": ns, "pod": pod}, 0.37)])
    answers["DCGM_FI_DEV_FB_USED"] = vector([({"namespace": ns, "pod": pod}, 5120)])
    answers["hami_container_device_utilization_ratio"] = vector([])
    readings = PrometheusMetrics(url).readings([allocation])
    assert readings[allocation.pk].activity_percent == pytest.approx(37.0)
    assert readings[allocation.pk].memory_used_mib == 5120
    assert any(f'namespace=~"{ns}"' in q for q in queries)


def test_prometheus_source_falls_back_to_device_utilisation(
    running: Runner, fake_prometheus: Any
) -> None:
    url, answers, _ = fake_prometheus
    request = running(minutes_ago=1)
    allocation = Allocation.objects.select_related("request__project__team", "pool").get(
        request=request
    )
    pod = f"gpr-{request.pk}-a1-abc"
    answers["DCGM_FI_DEV_GPU_UTIL"] = vector(
        [({"namespace": request.project.namespace, "pod": pod}, 12)]
    )
    assert PrometheusMetrics(url).readings([allocation])[allocation.pk].activity_percent == 12


def test_prometheus_source_matches_a_resumed_attempt_by_its_workload_and_no_other_request(
    running: Runner, fake_prometheus: Any
) -> None:
    url, answers, _ = fake_prometheus
    request = running(minutes_ago=1)
    ns = request.project.namespace
    answers["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] = vector(
        [
            ({"namespace": ns, "pod": f"gpr-{request.pk}-a1-7d9f8-x2kq"}, 0.5),
            # Another request whose id starts with this one's digits: never mixed in.
            ({"namespace": ns, "pod": f"gpr-{request.pk}0-a1-abc"}, 0.0),
        ]
    )
    select = Allocation.objects.select_related("request__project__team", "pool")
    Allocation.objects.filter(request=request).update(attempt=1, workload_name="")
    first = select.get(request=request)
    assert PrometheusMetrics(url).readings([first])[first.pk].activity_percent == 50.0
    # Attempt 2 took over attempt 1's scaled-to-zero Deployment, so its pods keep that name.
    Allocation.objects.filter(request=request).update(
        attempt=2, workload_name=f"gpr-{request.pk}-a1"
    )
    resumed = select.get(request=request)
    assert PrometheusMetrics(url).readings([resumed])[resumed.pk].activity_percent == 50.0


def test_prometheus_error_answer_raises(fake_prometheus: Any) -> None:
    url, answers, _ = fake_prometheus
    answers["up"] = {"status": "error", "error": "parse error"}
    with pytest.raises(PrometheusError, match="parse error"):
        PrometheusMetrics(url).query("up")


def test_simulated_samples_are_stored_once_per_interval(running: Runner) -> None:
    from datetime import timedelta

    from django.utils import timezone

    request = running(minutes_ago=1)
    SimulatedWorkload.objects.update(
        starts_at=timezone.now() - timedelta(minutes=1),
        ends_at=timezone.now() + timedelta(hours=1),
        utilisation_percent=2,
    )
    assert record_samples() == 1
    assert record_samples() == 0  # within the interval
    sample = UtilisationSample.objects.get()
    assert sample.activity_percent == 2 and sample.allocation.request_id == request.pk


def test_healthz_is_public_and_dependency_free() -> None:
    response = Client().get("/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok"}


def test_metrics_need_the_internal_network_or_the_token(running: Runner, settings: Any) -> None:
    running(minutes_ago=1)
    outside = Client(REMOTE_ADDR="8.8.4.4")
    assert outside.get(reverse("metrics")).status_code == 403
    assert outside.get(reverse("readyz")).status_code == 403
    settings.MONITORING_TOKEN = "s3cret-token"
    body = outside.get(reverse("metrics"), HTTP_AUTHORIZATION="Bearer s3cret-token")
    assert body.status_code == 200
    text = body.content.decode()
    assert 'gpu_portal_requests{state="running"} 1.0' in text
    assert "gpu_portal_team_quota_units" in text
    assert "gpu_portal_queue_wait_seconds" in text
    assert outside.get(reverse("metrics"), HTTP_AUTHORIZATION="Bearer nope").status_code == 403


@pytest.fixture
def broker_at(redis_url: str) -> Iterator[Callable[[str], None]]:
    """Point the Celery app at a broker URL for one test (a real Redis unless told otherwise);
    the suite's own broker setting is back afterwards."""
    from portal.celery import app

    previous = app.conf.broker_url
    use_broker(app, redis_url)
    yield lambda url: use_broker(app, url)
    use_broker(app, previous)


def test_readyz_is_ready_with_the_database_and_a_real_redis_broker(
    broker_at: Callable[[str], None], settings: Any
) -> None:
    settings.CLUSTER_BACKEND = "simulated"
    response = Client(REMOTE_ADDR="127.0.0.1").get(reverse("readyz"))
    assert response.status_code == 200, response.content
    assert response.json() == {
        "ready": True,
        "checks": {"database": "ok", "broker": "ok", "cluster": "ok"},
    }


def test_readyz_answers_503_and_names_the_broker_when_it_is_unreachable(
    broker_at: Callable[[str], None], settings: Any
) -> None:
    broker_at(f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
    response = Client(REMOTE_ADDR="127.0.0.1").get(reverse("readyz"))
    assert response.status_code == 503
    checks = response.json()["checks"]
    assert checks["database"] == "ok" and checks["broker"].startswith("failed: ")


def test_readyz_of_a_tier_without_cluster_credentials_leaves_the_cluster_out(
    broker_at: Callable[[str], None], settings: Any
) -> None:
    settings.READYZ_CHECKS_CLUSTER = False
    settings.CLUSTER_BACKEND = "kubernetes"  # no credentials here: checking would fail
    response = Client(REMOTE_ADDR="127.0.0.1").get(reverse("readyz"))
    assert response.status_code == 200, response.content
    assert response.json()["checks"] == {"database": "ok", "broker": "ok"}


def test_readyz_stays_ready_and_names_a_cluster_without_gpu_activity(
    broker_at: Callable[[str], None], settings: Any, running: Runner
) -> None:
    """The portal serves without GPU activity, so readiness holds; its detail says which
    cluster has none, since when and why, and that idle reclaim is paused there."""
    settings.READYZ_CHECKS_CLUSTER = False
    settings.CLUSTER_BACKEND = "kubernetes"
    settings.PROMETHEUS_URL = ""
    running(minutes_ago=1)
    record_samples()  # no Prometheus address: a gap opens
    response = Client(REMOTE_ADDR="127.0.0.1").get(reverse("readyz"))
    assert response.status_code == 200, response.content
    detail = response.json()["gpu_activity"]["local"]
    assert detail.startswith("no signal since ") and "No Prometheus address" in detail
    assert detail.endswith("Idle reclaim is paused.")


def test_task_failures_are_counted_for_metrics(settings: Any) -> None:
    from celery import shared_task

    @shared_task(name="tests.always_fails")
    def always_fails() -> None:
        raise RuntimeError("boom")

    for _ in range(2):
        always_fails.apply(throw=False)  # runs here; the failure signal fires as in a worker
    text = Client(REMOTE_ADDR="127.0.0.1").get(reverse("metrics")).content.decode()
    assert 'gpu_portal_task_failures{task="tests.always_fails"} 2.0' in text
