"""GPU activity from Prometheus: both label layouts against recorded answers, and no silent
signal: a real cluster never gets simulated figures, idle reclaim pauses while Prometheus is
missing, and the gap shows (audit, /readyz, /metrics, the fleet page, the request page)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from runtime.cluster.simulated import SimulatedCluster
from runtime.models import SimulatedWorkload
from runtime.services.monitoring import PrometheusMetrics, record_samples
from runtime.services.reclaim import enforce_reclaim_policies
from scheduling.choices import RequestStatus
from scheduling.models import (
    LOCAL_CLUSTER_SLUG,
    Allocation,
    Cluster,
    GpuRequest,
    local_cluster_id,
)
from scheduling.models import UtilisationSample as Sample
from scheduling.selectors.governance import governance_rules
from scripts.testbed.ports import free_port
from tenants.models import AuditEvent
from tests.governance.conftest import Runner
from tests.support.clusters import make_cluster
from tests.support.personas import Org
from tests.support.prometheus import FakePrometheus, serving

pytestmark = pytest.mark.django_db

# The recorded answers' workloads (tests/governance/prometheus/*.json), all in the namespace of
# team A's project "a-one": a 2-GPU job at 37 % and 41 %, an idle notebook at 0 %, another
# request whose id starts with the job's digits (90 %), and a pod the portal did not make.
JOB, NOTEBOOK = "gpr-4711-a1", "gpr-4712-a1"


def named(request: GpuRequest, workload: str) -> Allocation:
    """The request's allocation, its workload named as in the recorded answers."""
    Allocation.objects.filter(request=request).update(workload_name=workload)
    return Allocation.objects.select_related("request__project__team", "pool").get(request=request)


@pytest.fixture
def local(fleet: Any) -> Cluster:
    return Cluster.objects.get(pk=local_cluster_id())


@pytest.fixture
def kubernetes(settings: Any) -> Any:
    """The local cluster is a real one; no global Prometheus."""
    settings.CLUSTER_BACKEND = "kubernetes"
    settings.PROMETHEUS_URL = ""
    settings.SAMPLE_INTERVAL_SECONDS = 60
    settings.ACTIVITY_SIGNAL_MAX_AGE_SECONDS = 180
    return settings


@pytest.fixture
def operator_prometheus() -> Iterator[FakePrometheus]:
    with serving(FakePrometheus.recorded("gpu-operator")) as fake:
        yield fake


@pytest.mark.parametrize(
    ("recorded", "layout", "overrides"),
    [
        ("gpu-operator", "gpu-operator", {}),
        ("dcgm-exporter", "dcgm-exporter", {}),
        # The labels named one by one, whatever the layout.
        (
            "dcgm-exporter",
            "gpu-operator",
            {
                "PROMETHEUS_POD_LABEL": "exported_pod",
                "PROMETHEUS_NAMESPACE_LABEL": "exported_namespace",
            },
        ),
    ],
)
def test_dcgm_series_map_to_their_allocations_in_each_label_layout(
    running: Runner, settings: Any, recorded: str, layout: str, overrides: dict[str, str]
) -> None:
    settings.PROMETHEUS_LABEL_LAYOUT = layout
    for name, value in overrides.items():
        setattr(settings, name, value)
    job = named(running(minutes_ago=5), JOB)
    notebook = named(running(minutes_ago=5), NOTEBOOK)
    with serving(FakePrometheus.recorded(recorded)) as fake:
        source = PrometheusMetrics(fake.url)
        readings = source.readings([job, notebook])
        census = source.census()
    # Two GPUs of one pod: activity averaged, memory added up; the other request's 90 % and the
    # pod the portal did not make are not mixed in.
    assert readings[job.pk].activity_percent == pytest.approx(39.0)
    assert readings[job.pk].memory_used_mib == 20480 + 19968
    assert readings[notebook.pk].activity_percent == 0.0
    assert readings[notebook.pk].memory_used_mib == 312
    assert set(readings) == {job.pk, notebook.pk}
    assert census.describe() == "6 GPUs on 2 hosts (NVIDIA L4)"


@pytest.mark.parametrize(
    ("env", "complaint"),
    [
        ({"PROMETHEUS_LABEL_LAYOUT": "kube-prometheus"}, "PROMETHEUS_LABEL_LAYOUT must be"),
        ({"PROMETHEUS_POD_LABEL": "exported-pod"}, "PROMETHEUS_POD_LABEL='exported-pod' is not"),
        ({"PROMETHEUS_UTILISATION_METRIC": ""}, "PROMETHEUS_UTILISATION_METRIC='' is not"),
    ],
)
def test_a_bad_layout_or_name_stops_the_portal_at_start(
    env: dict[str, str], complaint: str
) -> None:
    """A misspelt label or metric name would make every poll a gap: it fails at start."""
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings", **env},
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert complaint in result.stderr


def test_the_wrong_layout_finds_no_workload(running: Runner, settings: Any) -> None:
    """Read with the GPU operator's labels, a standalone exporter's series name the exporter's
    own pod: nothing matches, so the layout setting is what makes samples land."""
    settings.PROMETHEUS_LABEL_LAYOUT = "gpu-operator"
    job = named(running(minutes_ago=5), JOB)
    with serving(FakePrometheus.recorded("dcgm-exporter")) as fake:
        assert PrometheusMetrics(fake.url).readings([job]) == {}


def test_a_kubernetes_cluster_without_prometheus_gets_no_simulated_samples(
    running: Runner, kubernetes: Any, local: Cluster
) -> None:
    request = running(minutes_ago=5)
    # The simulator would call this work 2 % busy; a real cluster must never be sampled from it.
    SimulatedWorkload.objects.filter(request_key=str(request.pk)).update(
        starts_at=timezone.now() - timedelta(minutes=5),
        ends_at=timezone.now() + timedelta(hours=1),
        utilisation_percent=2,
    )
    assert record_samples() == 0
    assert record_samples() == 0
    assert not Sample.objects.exists()
    local.refresh_from_db()
    assert local.activity_gap_since is not None
    assert "No Prometheus address" in local.activity_gap_reason
    lost = AuditEvent.objects.filter(action="monitoring.signal_lost")
    assert lost.count() == 1  # once per transition, not per poll
    assert lost.get().target_id == str(local.pk)


def test_the_simulated_cluster_keeps_its_simulated_samples(running: Runner, settings: Any) -> None:
    settings.CLUSTER_BACKEND = "simulated"
    settings.PROMETHEUS_URL = f"http://127.0.0.1:{free_port()}"  # ignored: the simulator's own
    request = running(minutes_ago=5)
    SimulatedWorkload.objects.filter(request_key=str(request.pk)).update(
        starts_at=timezone.now() - timedelta(minutes=5),
        ends_at=timezone.now() + timedelta(hours=1),
        utilisation_percent=2,
    )
    assert record_samples() == 1
    assert Sample.objects.get().activity_percent == 2
    assert not AuditEvent.objects.filter(action__startswith="monitoring.").exists()


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ("failing", "HTTP 503, query refused: down"),  # Prometheus up but failing
        ("wrong-path", "HTTP 404, not a Prometheus answer"),  # an HTML error page
        # Prometheus answers, but no exporter is scraped (or the metric names are wrong).
        ("no-series", "holds no DCGM_FI_DEV_GPU_UTIL or DCGM_FI_PROF_GR_ENGINE_ACTIVE series"),
    ],
)
def test_a_failing_or_empty_prometheus_is_a_gap(
    running: Runner, kubernetes: Any, local: Cluster, answer: str, reason: str
) -> None:
    named(running(minutes_ago=5), NOTEBOOK)
    fake = FakePrometheus({}) if answer == "no-series" else FakePrometheus.recorded("gpu-operator")
    if answer == "failing":
        fake.fail_with(503)
    url = f"{fake.url}/prometheus" if answer == "wrong-path" else fake.url
    Cluster.objects.filter(pk=local.pk).update(prometheus_url=url)
    with serving(fake):
        assert record_samples() == 0
    local.refresh_from_db()
    assert local.activity_gap_since is not None
    assert reason in local.activity_gap_reason
    assert url in local.activity_gap_reason
    assert not Sample.objects.exists()


def test_a_cluster_of_mig_slices_reports_through_the_profiling_metric(
    running: Runner, kubernetes: Any, local: Cluster
) -> None:
    """A MIG slice has no DCGM_FI_DEV_GPU_UTIL, only the profiling ratio: that is a signal."""
    allocation = named(running(minutes_ago=5), NOTEBOOK)
    series = {
        "__name__": "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "GPU_I_ID": "3",
        "GPU_I_PROFILE": "1g.10gb",
        "Hostname": "gpu-h100-01",
        "UUID": "GPU-5c4e2b1a-8f3d-4e6a-9b7c-1d2e3f4a5b6c",
        "modelName": "NVIDIA H100 80GB HBM3",
        "namespace": allocation.request.project.namespace,
        "pod": f"{NOTEBOOK}-5d8f9c7b6-q4wzn",
    }
    answer = {"resultType": "vector", "result": [{"metric": series, "value": [0, "0.25"]}]}
    fake = FakePrometheus({series["__name__"]: {"status": "success", "data": answer}})
    Cluster.objects.filter(pk=local.pk).update(prometheus_url=fake.url)
    with serving(fake):
        assert record_samples() == 1
    assert Sample.objects.get().activity_percent == pytest.approx(25.0)
    local.refresh_from_db()
    assert local.activity_gap_since is None and local.activity_signal_at is not None
    assert local.activity_census == "1 GPU on 1 host (NVIDIA H100 80GB HBM3)"


def poll_and_enforce(at: datetime) -> dict[str, int]:
    """One utilisation poll and one reclaim pass at `at` (the zombie pass on the simulator's
    workload rows: this test is about the idle ladder)."""
    record_samples(now=at)
    return enforce_reclaim_policies(now=at, backend=SimulatedCluster(speed=1.0))


def test_idle_work_is_not_reclaimed_while_prometheus_is_down_and_is_once_it_shows_idleness(
    running: Runner, kubernetes: Any, local: Cluster
) -> None:
    """Forty idle minutes and a warning twenty minutes old would reclaim at once; with
    Prometheus unreachable nothing is reclaimed, and once it answers again the idle ladder
    starts from there: warned after 20 minutes of observed idleness, reclaimed after 30."""
    request = running(minutes_ago=120)  # 30-minute window, warned 10 minutes before
    allocation = named(request, NOTEBOOK)
    start = timezone.now()
    Sample.objects.bulk_create(
        Sample(
            allocation=allocation, sampled_at=start - timedelta(minutes=40 - i), activity_percent=1
        )
        for i in range(40)
    )
    GpuRequest.objects.filter(pk=request.pk).update(idle_warned_at=start - timedelta(minutes=20))
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    Cluster.objects.filter(pk=local.pk).update(
        prometheus_url=down,
        activity_signal_at=start - timedelta(minutes=1),
        activity_signal_since=start - timedelta(hours=3),
    )

    for minute in (0, 5, 10):
        assert poll_and_enforce(start + timedelta(minutes=minute)) == {"idle_paused": 1}
    assert GpuRequest.objects.get(pk=request.pk).status == RequestStatus.RUNNING
    local.refresh_from_db()
    assert local.activity_gap_since == start - timedelta(minutes=1)  # the last activity
    assert "unreachable" in local.activity_gap_reason
    rules = governance_rules(gpu_request=request, now=start + timedelta(minutes=10))
    assert rules.idle_paused and rules.idle_reclaim_at is None
    owner = Client()
    owner.force_login(request.owner)
    page = owner.get(reverse("gpu-request-page", kwargs={"pk": request.pk})).content.decode()
    assert 'data-testid="idle-paused"' in page and 'data-testid="idle-countdown"' not in page

    with serving(FakePrometheus.recorded("gpu-operator")) as fake:
        Cluster.objects.filter(pk=local.pk).update(prometheus_url=fake.url)
        back = start + timedelta(minutes=15)
        # One poll a minute, as beat runs it (SAMPLE_INTERVAL_SECONDS).
        outcomes = {m: poll_and_enforce(back + timedelta(minutes=m)) for m in range(31)}
    acted = {minute: outcome for minute, outcome in outcomes.items() if outcome}
    assert acted == {20: {"idle_warned": 1}, 30: {"idle_reclaimed": 1}}
    request.refresh_from_db()
    assert request.status == RequestStatus.RECLAIMED
    event = AuditEvent.objects.get(action="reclaim.idle", target_id=str(request.pk))
    assert event.data["idle_since"] == pytest.approx(back.timestamp())
    assert AuditEvent.objects.filter(action="monitoring.signal_lost").count() == 1
    restored = AuditEvent.objects.get(action="monitoring.signal_restored")
    assert restored.data["census"] == "6 GPUs on 2 hosts (NVIDIA L4)"


def test_a_stale_sample_pauses_idle_reclaim_although_the_cluster_answers(
    running: Runner, kubernetes: Any, local: Cluster
) -> None:
    """The cluster's Prometheus answers, but this work's series stopped coming ten minutes
    ago: its old idle samples are no evidence now."""
    request = running(minutes_ago=120)
    allocation = named(request, "gpr-9999-a1")  # in no recorded answer
    now = timezone.now()
    Sample.objects.bulk_create(
        Sample(
            allocation=allocation, sampled_at=now - timedelta(minutes=60 - i), activity_percent=1
        )
        for i in range(50)
    )
    GpuRequest.objects.filter(pk=request.pk).update(idle_warned_at=now - timedelta(minutes=20))
    with serving(FakePrometheus.recorded("gpu-operator")) as fake:
        Cluster.objects.filter(pk=local.pk).update(
            prometheus_url=fake.url,
            activity_signal_at=now - timedelta(minutes=1),
            activity_signal_since=now - timedelta(hours=3),
        )
        assert poll_and_enforce(now) == {"idle_paused": 1}
    assert GpuRequest.objects.get(pk=request.pk).status == RequestStatus.RUNNING


def test_metrics_export_each_real_clusters_signal_age(
    org: Org, kubernetes: Any, local: Cluster
) -> None:
    east = make_cluster(org.admin, slug="east")
    Cluster.objects.filter(pk=local.pk).update(
        activity_signal_at=timezone.now() - timedelta(seconds=42)
    )
    text = Client(REMOTE_ADDR="127.0.0.1").get(reverse("metrics")).content.decode()
    line = next(x for x in text.splitlines() if x.startswith("gpu_portal_metrics_signal_age"))
    assert line.startswith('gpu_portal_metrics_signal_age_seconds{cluster="east"} +Inf')
    local_line = f'gpu_portal_metrics_signal_age_seconds{{cluster="{LOCAL_CLUSTER_SLUG}"}} '
    age = float(next(x for x in text.splitlines() if x.startswith(local_line)).split()[-1])
    assert 42 <= age < 60
    assert east.expects_activity_signal


def test_the_simulated_cluster_has_no_signal_age(settings: Any, local: Cluster) -> None:
    settings.CLUSTER_BACKEND = "simulated"
    text = Client(REMOTE_ADDR="127.0.0.1").get(reverse("metrics")).content.decode()
    assert f'gpu_portal_metrics_signal_age_seconds{{cluster="{LOCAL_CLUSTER_SLUG}"}}' not in text


def test_the_fleet_page_warns_admins_of_a_cluster_without_signal(
    org: Org, kubernetes: Any, local: Cluster
) -> None:
    record_samples()
    client = Client()
    client.force_login(org.admin)
    page = client.get(reverse("fleet-page")).content.decode()
    assert 'data-testid="activity-gap"' in page
    assert "No GPU activity from Prometheus for cluster <strong>Local cluster</strong>" in page
    assert "Idle reclaim is paused" in page
    with serving(FakePrometheus.recorded("gpu-operator")) as fake:
        Cluster.objects.filter(pk=local.pk).update(prometheus_url=fake.url)
        record_samples()
    page = client.get(reverse("fleet-page")).content.decode()
    assert 'data-testid="activity-gap"' not in page
    assert '<span data-testid="cluster-activity">6 GPUs on 2 hosts (NVIDIA L4)</span>' in page
    kubernetes.CLUSTER_BACKEND = "simulated"
    assert 'data-testid="activity-gap"' not in client.get(reverse("fleet-page")).content.decode()
