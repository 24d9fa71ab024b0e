"""SCHEDULER=kueue: the cycle hands every queued request to Kueue without the engine, and the
portal refuses what Kueue cannot run here yet (notebooks, services)."""

from __future__ import annotations

import html
import os
import subprocess
import sys
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from runtime.cluster.kueue_workloads import KueueView
from runtime.selectors.workloads import stuck_requests
from runtime.services import kueue_admission
from runtime.services.execution import workload_spec
from scheduling.choices import RequestStatus
from scheduling.models import Allocation, GpuRequest
from scheduling.services import cycle
from tenants.models import AuditEvent
from tests.scheduling.conftest import Fleet
from tests.scheduling.helpers import request_body
from tests.support.factories import GpuRequestFactory, api_submit
from tests.support.personas import Org

pytestmark = pytest.mark.django_db


@pytest.fixture
def kueue(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    settings.SCHEDULER = "kueue"

    def no_engine(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the engine must not plan under SCHEDULER=kueue")

    monkeypatch.setattr(cycle.planner, "plan", no_engine)


def test_the_cycle_admits_every_queued_request_without_node_or_claims(
    kueue: None, org: Org, fleet: Fleet
) -> None:
    # More than the team's guaranteed 4 A100s: Kueue, not the portal, decides what runs.
    requests = GpuRequestFactory.create_batch(
        2, project=org.project_a, flavor=fleet.a100, kind="job", gpu_count=4, to="queued"
    )
    assert {r.status for r in GpuRequest.objects.all()} == {RequestStatus.QUEUED}
    admitted: list[tuple[int, int]] = []

    result = cycle.run_cycle(on_admit=lambda r, a: admitted.append((r, a)))

    assert result.ran and sorted(result.admitted) == sorted(r.pk for r in requests)
    for request in GpuRequest.objects.all():
        assert (request.status, request.attempt) == (RequestStatus.ADMITTED, 1)
        allocation = Allocation.objects.get(request=request)
        assert (allocation.node_name, allocation.claims) == ("", [])
        assert allocation.pool_id == fleet.a100.pool_id
        spec = workload_spec(request, allocation)
        assert (spec.queue_name, spec.node_name, spec.gang) == ("gpu-portal", None, ())
    assert cycle.run_cycle().admitted == []  # nothing queued any more


def test_notebooks_and_services_are_refused_at_submit(kueue: None, org: Org, fleet: Fleet) -> None:
    for kind in ("notebook", "service"):
        response = api_submit(
            org.dev_a, request_body(org.project_a, fleet.l4_12g, kind=kind), status=400
        )
        assert "batch jobs only under SCHEDULER=kueue" in response.json()["error"]["fields"]["kind"]
    api_submit(org.dev_a, request_body(org.project_a, fleet.l4_12g, kind="job"), status=201)


def launching(org: Org, fleet: Fleet) -> GpuRequest:
    request = GpuRequestFactory.create(
        project=org.project_a, flavor=fleet.a100, kind="job", to="queued"
    )
    GpuRequest.objects.filter(pk=request.pk).update(status=RequestStatus.LAUNCHING, attempt=1)
    Allocation.objects.create(request=request, attempt=1, pool=fleet.a100.pool, claims=[])
    return GpuRequest.objects.select_related("project").get(pk=request.pk)


def test_a_request_kueue_holds_shows_its_reason_and_position(
    kueue: None, org: Org, fleet: Fleet
) -> None:
    request = launching(org, fleet)
    key = (org.project_a.namespace, f"gpr-{request.pk}-a1")
    view = KueueView(*key, "pending", "Pending", "insufficient unused quota", "cq", position=2)

    assert kueue_admission.apply_kueue_views([request], {key: view}) == {request.pk}
    request.refresh_from_db()
    assert (request.waiting_reason, request.queue_position) == ("insufficient unused quota", 2)
    assert request.status_reason == kueue_admission.HELD_REASON
    assert not kueue_admission.record_kueue_wait(request, view)  # unchanged: no write
    client = Client()
    client.force_login(org.dev_a)
    page = client.get(reverse("gpu-request-page", args=[request.pk])).content.decode()
    assert html.escape(kueue_admission.KUEUE_HEADLINE) in page
    assert "The cluster says: insufficient unused quota · position 2 in the queue" in page
    home = client.get(reverse("home")).content.decode()
    assert html.escape(kueue_admission.KUEUE_HEADLINE) in home  # the same one sentence

    assert request.waiting_code == "kueue"  # the reclaim's pending timeout leaves it alone
    # Nor does the stuck-request sweeper launch it again, however long Kueue holds it.
    GpuRequest.objects.filter(pk=request.pk).update(updated_at=timezone.now() - timedelta(days=1))
    assert (request.pk, 1) not in stuck_requests(older_than_seconds=60)

    # Admitted an hour after the hand-over: the cluster's pending clock starts then.
    allocation = Allocation.objects.get(request=request)
    at = allocation.admitted_at + timedelta(hours=1)
    admitted = KueueView(*key, "admitted", "Admitted", "Admitted", "cq", admitted_at=at)
    assert kueue_admission.apply_kueue_views([request], {key: admitted}) == set()
    request.refresh_from_db()
    assert (request.queue_position, request.waiting_code) == (None, "")
    allocation.refresh_from_db()
    assert allocation.admitted_at == at


def test_a_request_kueue_evicts_is_preempted_and_requeued(
    kueue: None, org: Org, fleet: Fleet, django_capture_on_commit_callbacks: Any
) -> None:
    request = launching(org, fleet)
    key = (org.project_a.namespace, f"gpr-{request.pk}-a1")
    message = "Kueue preempted it for request 9 (prioritization in the ClusterQueue)."
    view = KueueView(*key, "evicted", "Preempted", message, "cq", preempted_by_request="9")

    with django_capture_on_commit_callbacks() as callbacks:
        assert kueue_admission.apply_kueue_views([request], {key: view}) == {request.pk}
    assert len(callbacks) == 2  # the old attempt's termination, and a cycle
    request.refresh_from_db()
    assert request.status == RequestStatus.QUEUED
    assert AuditEvent.objects.filter(
        target_id=str(request.pk), action="request.preempted", message=message
    ).exists()
    allocation = Allocation.objects.get(request=request)
    assert allocation.ended_at is not None and allocation.end_reason == "preempted"


@pytest.mark.parametrize(
    ("environment", "complaint"),
    [
        ({"SCHEDULER": "volcano"}, "SCHEDULER must be 'portal' or 'kueue'"),
        (
            {"SCHEDULER": "kueue", "CLUSTER_BACKEND": "simulated"},
            "needs CLUSTER_BACKEND=kubernetes",
        ),
    ],
)
def test_the_portal_refuses_to_start_with_a_scheduler_it_cannot_run(
    environment: dict[str, str], complaint: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import portal.settings"],
        env={**os.environ, **environment},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0 and complaint in done.stderr
