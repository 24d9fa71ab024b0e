"""Reclaimed notebooks and services are scaled to zero, kept while they can be resumed, and
resumed in place; jobs are deleted. On the simulated backend, in one process."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone

from runtime import tasks as _tasks  # noqa: F401 — registers the tasks queued by name
from runtime.cluster.simulated import SCALED_TO_ZERO, SimulatedCluster
from runtime.models import SimulatedWorkload
from runtime.services import execution
from runtime.services.reclaim import enforce_reclaim_policies, reclaim_request
from scheduling.choices import RequestStatus
from scheduling.models import Allocation, GpuRequest
from scheduling.services import cycle
from tenants.models import AuditEvent
from tests.governance.conftest import Runner
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db
BACKEND = SimulatedCluster(speed=1.0)


def reclaim(request: GpuRequest, capture: Any) -> None:
    with capture(execute=True):  # the scale-down task runs after commit
        assert reclaim_request(request, reason="Idle.", code="idle", evidence={})
    request.refresh_from_db()


def workload_of(request: GpuRequest) -> SimulatedWorkload:
    (workload,) = SimulatedWorkload.objects.filter(request_key=str(request.pk))
    return workload


def test_reclaimed_notebook_is_scaled_to_zero_not_deleted(
    running: Runner, django_capture_on_commit_callbacks: Any
) -> None:
    request = running(minutes_ago=10, kind="notebook")
    reclaim(request, django_capture_on_commit_callbacks)
    assert request.status == RequestStatus.RECLAIMED
    assert not Allocation.objects.active().filter(request=request).exists()  # GPUs are free
    status = BACKEND.get_workload(request.project.namespace, str(request.pk), 1)
    assert status.phase == "suspended" and status.suspended_at is not None
    assert workload_of(request).failure_reason == SCALED_TO_ZERO
    # A second scale-down (a retried task) keeps the first suspension time.
    first = status.suspended_at
    assert BACKEND.scale_to_zero(request.project.namespace, str(request.pk), 1, reason="again")
    assert BACKEND.get_workload(request.project.namespace, str(request.pk), 1).suspended_at == first


def test_reclaimed_job_is_deleted(running: Runner, django_capture_on_commit_callbacks: Any) -> None:
    request = running(minutes_ago=10, kind="job")
    reclaim(request, django_capture_on_commit_callbacks)
    assert not SimulatedWorkload.objects.filter(request_key=str(request.pk)).exists()


def test_resume_takes_the_same_workload_back_as_the_new_attempt(
    org: Org, running: Runner, django_capture_on_commit_callbacks: Any
) -> None:
    request = running(minutes_ago=10, kind="notebook")
    reclaim(request, django_capture_on_commit_callbacks)
    name = workload_of(request).name
    resumed = api_client(org.dev_a).post(
        reverse("gpu-request-resume", kwargs={"pk": request.pk}), {}, format="json"
    )
    assert resumed.status_code == 200, resumed.content
    # The scaled-to-zero workload waits for the new attempt: it is not a zombie meanwhile.
    assert "zombies_removed" not in enforce_reclaim_policies(backend=BACKEND)
    with django_capture_on_commit_callbacks(execute=False):
        cycle.run_cycle()
    request.refresh_from_db()
    assert (request.status, request.attempt) == (RequestStatus.ADMITTED, 2)
    assert execution.launch_request(request_id=request.pk, attempt=2, backend=BACKEND) == name
    # Twice (a retried launch task): still the one workload.
    assert execution.launch_request(request_id=request.pk, attempt=2, backend=BACKEND) == name
    workload = workload_of(request)
    assert (workload.name, workload.attempt, workload.failure_reason) == (name, 2, "")
    assert Allocation.objects.get(request=request, attempt=2).workload_name == name
    status = BACKEND.get_workload(request.project.namespace, str(request.pk), 2)
    assert status.phase == "pending" and status.name == name
    assert BACKEND.get_workload(request.project.namespace, str(request.pk), 1).phase == "missing"


def test_suspended_workload_is_kept_within_the_retention_then_deleted(
    running: Runner, django_capture_on_commit_callbacks: Any, settings: Any
) -> None:
    settings.SUSPENDED_WORKLOAD_RETENTION_SECONDS = 3600
    request = running(minutes_ago=10, kind="notebook")
    reclaim(request, django_capture_on_commit_callbacks)
    later = timezone.now() + timedelta(minutes=30)
    assert "zombies_removed" not in enforce_reclaim_policies(now=later, backend=BACKEND)
    assert SimulatedWorkload.objects.filter(request_key=str(request.pk)).exists()
    expired = timezone.now() + timedelta(minutes=61)
    outcome = enforce_reclaim_policies(now=expired, backend=BACKEND)
    # The reclaimed notebook's leftover is cleaned up: its work ended, it is no zombie.
    assert outcome["finished_workloads_removed"] == 1 and "zombies_removed" not in outcome
    assert not SimulatedWorkload.objects.filter(request_key=str(request.pk)).exists()
    cleaned = AuditEvent.objects.filter(target_id=str(request.pk), action="workload.cleaned_up")
    assert cleaned.exists()
    assert not AuditEvent.objects.filter(action="reclaim.zombie").exists()


def test_suspended_workload_of_a_request_that_can_no_longer_resume_is_cleaned_up(
    running: Runner, django_capture_on_commit_callbacks: Any
) -> None:
    request = running(minutes_ago=10, kind="notebook")
    reclaim(request, django_capture_on_commit_callbacks)
    GpuRequest.objects.filter(pk=request.pk).update(
        status=RequestStatus.FAILED, updated_at=timezone.now() - timedelta(hours=1)
    )
    assert enforce_reclaim_policies(backend=BACKEND) == {"finished_workloads_removed": 1}
    assert not SimulatedWorkload.objects.filter(request_key=str(request.pk)).exists()
