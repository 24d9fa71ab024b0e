"""Reclamation end to end in one process: samples in, warnings, reclaims and requeues out."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core import mail
from django.utils import timezone

from runtime.cluster.simulated import SimulatedCluster
from runtime.models import SimulatedWorkload
from runtime.services.reclaim import enforce_reclaim_policies
from scheduling.choices import RequestStatus
from scheduling.models import Allocation, GpuRequest, Node, UtilisationSample
from scheduling.services.governance import grant_idle_exemption
from tenants.models import AuditEvent
from tests.governance.conftest import Runner

pytestmark = pytest.mark.django_db
BACKEND = SimulatedCluster(speed=1.0)


def add_samples(request: GpuRequest, *, minutes: int, activity: float, until: Any = None) -> None:
    allocation = Allocation.objects.active().get(request=request)
    now = until or timezone.now()
    UtilisationSample.objects.bulk_create(
        UtilisationSample(
            allocation=allocation,
            sampled_at=now - timedelta(minutes=minutes - i),
            activity_percent=activity,
        )
        for i in range(minutes + 1)
    )


def enforce(at: Any = None) -> dict[str, int]:
    return enforce_reclaim_policies(now=at or timezone.now(), backend=BACKEND)


def test_idle_work_is_warned_then_reclaimed_with_evidence(
    running: Runner, django_capture_on_commit_callbacks: Any
) -> None:
    request = running(minutes_ago=40)
    add_samples(request, minutes=25, activity=1.0)  # 30-minute window, warned 10 minutes before
    with django_capture_on_commit_callbacks(execute=True):
        assert enforce() == {"idle_warned": 1}
    request.refresh_from_db()
    assert request.status == RequestStatus.RUNNING and request.idle_warned_at is not None
    assert Allocation.objects.active().get(request=request).is_preemptible
    assert "will be reclaimed" in mail.outbox[-1].subject
    assert enforce() == {}  # warned once only

    later = timezone.now() + timedelta(minutes=11)
    add_samples(request, minutes=10, activity=2.0, until=later)
    with django_capture_on_commit_callbacks(execute=True):
        assert enforce(later) == {"idle_reclaimed": 1}
    request.refresh_from_db()
    assert request.status == RequestStatus.RECLAIMED
    assert "under 5%" in request.status_reason
    event = AuditEvent.objects.get(action="reclaim.idle", target_id=str(request.pk))
    assert event.data["peak_activity_percent"] == 2.0
    assert event.data["window_seconds"] == 1800
    assert not Allocation.objects.active().filter(request=request).exists()
    assert not SimulatedWorkload.objects.filter(request_key=str(request.pk)).exists()


def test_busy_work_is_left_alone(running: Runner) -> None:
    request = running(minutes_ago=60)
    add_samples(request, minutes=60, activity=70.0)
    assert enforce() == {}
    request.refresh_from_db()
    assert request.status == RequestStatus.RUNNING


def test_an_exemption_keeps_idle_work(running: Runner, org: Any) -> None:

    request = running(minutes_ago=60)
    add_samples(request, minutes=60, activity=0.0)
    grant_idle_exemption(actor=org.lead_a, request=request, hours=2)
    assert enforce(timezone.now() + timedelta(minutes=30)) == {}


def test_timeout_warns_then_stops(running: Runner) -> None:
    request = running(minutes_ago=50, max_runtime_seconds=3600)
    add_samples(request, minutes=5, activity=90.0)
    assert enforce() == {"timeout_warned": 1}
    assert enforce(timezone.now() + timedelta(minutes=11)) == {"timeout_stopped": 1}
    request.refresh_from_db()
    assert request.status == RequestStatus.RECLAIMED
    assert "max runtime" in request.status_reason
    assert AuditEvent.objects.filter(action="reclaim.timeout", target_id=str(request.pk)).exists()


def test_a_lost_node_requeues_its_work_until_the_attempts_run_out(running: Runner) -> None:
    request = running(minutes_ago=5)
    node = Allocation.objects.get(request=request).claims[0]["node"]
    Node.objects.filter(name=node).update(is_schedulable=False)
    assert enforce() == {}  # within the grace period: it may be back in a minute
    assert enforce(timezone.now() + timedelta(seconds=301)) == {"node_lost_requeued": 1}
    request.refresh_from_db()
    assert request.status == RequestStatus.QUEUED
    assert "lost" in request.status_reason
    assert AuditEvent.objects.filter(action="reclaim.node_lost").count() == 1

    # Two more tries later, the third attempt runs on a node that is lost too.
    GpuRequest.objects.filter(pk=request.pk).update(status=RequestStatus.RUNNING, attempt=3)
    Allocation.objects.filter(request=request).update(ended_at=None, attempt=3)
    SimulatedWorkload.objects.filter(request_key=str(request.pk)).update(attempt=3)
    assert enforce(timezone.now() + timedelta(seconds=301)) == {"node_lost_failed": 1}
    request.refresh_from_db()
    assert request.status == RequestStatus.FAILED and "gave up" in request.status_reason


def test_a_node_back_within_the_grace_period_keeps_its_work(running: Runner) -> None:
    request = running(minutes_ago=5)
    node = Allocation.objects.get(request=request).claims[0]["node"]
    Node.objects.filter(name=node).update(is_schedulable=False)
    assert enforce() == {}
    assert Node.objects.get(name=node).unschedulable_since is not None
    Node.objects.filter(name=node).update(is_schedulable=True)  # the next inventory sync
    assert enforce(timezone.now() + timedelta(minutes=10)) == {}
    assert Node.objects.get(name=node).unschedulable_since is None
    request.refresh_from_db()
    assert request.status == RequestStatus.RUNNING and request.attempt == 1


def test_work_stuck_pending_is_requeued(running: Runner) -> None:
    request = running(minutes_ago=0)
    GpuRequest.objects.filter(pk=request.pk).update(status=RequestStatus.LAUNCHING)
    Allocation.objects.filter(request=request).update(
        admitted_at=timezone.now() - timedelta(hours=2)
    )
    assert enforce() == {"stuck_pending_requeued": 1}


def test_zombie_workloads_are_removed_and_live_ones_kept(running: Runner) -> None:
    request = running(minutes_ago=1)
    zombie = SimulatedWorkload.objects.get(request_key=str(request.pk))
    zombie.pk = None
    zombie.name, zombie.request_key = "gpr-99999-a1", "99999"
    zombie.save()
    assert enforce() == {"zombies_removed": 1}
    assert list(SimulatedWorkload.objects.values_list("request_key", flat=True)) == [
        str(request.pk)
    ]
    assert AuditEvent.objects.filter(action="reclaim.zombie").exists()


def test_the_leftover_of_a_finished_request_is_cleanup_not_a_zombie(running: Runner) -> None:
    request = running(minutes_ago=1)
    GpuRequest.objects.filter(pk=request.pk).update(
        status=RequestStatus.SUCCEEDED, updated_at=timezone.now() - timedelta(hours=1)
    )
    assert enforce() == {"finished_workloads_removed": 1}
    assert not SimulatedWorkload.objects.exists()
    assert not AuditEvent.objects.filter(action="reclaim.zombie").exists()
    assert AuditEvent.objects.filter(
        action="workload.cleaned_up", target_id=str(request.pk)
    ).exists()


def test_running_request_whose_workload_vanished_fails(running: Runner) -> None:
    from runtime.services.execution import sync_workloads

    request = running(minutes_ago=1)
    SimulatedWorkload.objects.all().delete()
    sync_workloads(backend=BACKEND)
    request.refresh_from_db()
    assert request.status == RequestStatus.FAILED
    assert "disappeared" in request.status_reason
