"""The runtime-governance story end to end on the simulated cluster, time passed in.

An idle notebook is warned, then reclaimed (scaled to zero) with its evidence on the page and
in the API; a job past its max runtime is stopped; a zombie workload is removed; preempted work
returns to the queue with its original age and runs again; /metrics shows all of it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from runtime.cluster.simulated import SCALED_TO_ZERO, SimulatedCluster
from runtime.models import SimulatedWorkload
from runtime.services import execution
from runtime.services.reclaim import enforce_reclaim_policies
from scheduling.choices import RequestStatus
from scheduling.models import Allocation, GpuRequest, ReclaimPolicy, Tier, UtilisationSample
from scheduling.services import cycle
from scheduling.services.quotas import set_quota
from tests.governance.conftest import Runner
from tests.scheduling.conftest import Fleet
from tests.support.factories import GpuRequestFactory
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db
SLOW = SimulatedCluster(speed=1.0)
FAST = SimulatedCluster(speed=100_000)  # SIMULATION_SPEED raised: starts and ends within ms


@pytest.fixture
def drive(django_capture_on_commit_callbacks: Any) -> Callable[[], cycle.CycleResult]:
    """One scheduling cycle, then what it queued: launches and terminations, on FAST."""

    def run() -> cycle.CycleResult:
        admitted: list[tuple[int, int]] = []
        preempted: list[tuple[int, int]] = []
        with django_capture_on_commit_callbacks(execute=True):
            result = cycle.run_cycle(
                on_admit=lambda r, a: admitted.append((r, a)),
                on_preempt=lambda r, a: preempted.append((r, a)),
            )
        for request_id, attempt in preempted:
            execution.terminate_request_workload(
                request_id=request_id, attempt=attempt, reason="preempted", backend=FAST
            )
        for request_id, attempt in admitted:
            execution.launch_request(request_id=request_id, attempt=attempt, backend=FAST)
        return result

    return run


def idle_samples(request: GpuRequest, *, minutes: int, activity: float) -> None:
    allocation = Allocation.objects.active().get(request=request)
    now = timezone.now()
    UtilisationSample.objects.bulk_create(
        UtilisationSample(
            allocation=allocation,
            sampled_at=now - timedelta(minutes=minutes - i),
            activity_percent=activity,
        )
        for i in range(minutes + 1)
    )


def page(username: str, name: str, *args: Any) -> str:
    client = Client()
    assert client.login(username=username, password=f"pw-{username}")
    response = client.get(reverse(name, args=args))
    assert response.status_code == 200
    return response.content.decode()


def metrics() -> str:
    return Client(REMOTE_ADDR="127.0.0.1").get(reverse("metrics")).content.decode()


def test_idle_timeout_and_zombie_are_reclaimed_with_evidence_visible(
    org: Org, running: Runner, django_capture_on_commit_callbacks: Any
) -> None:
    notebook = running(kind="notebook", minutes_ago=70, max_runtime_seconds=6 * 3600)
    idle_samples(notebook, minutes=55, activity=1.0)
    job = running(minutes_ago=61, max_runtime_seconds=3600)
    live = SimulatedWorkload.objects.get(request_key=str(job.pk))
    zombie = SimulatedWorkload.objects.get(request_key=str(notebook.pk))
    zombie.pk, zombie.name, zombie.request_key = None, "gpr-99999-a1", "99999"
    zombie.save()

    now = timezone.now()
    with django_capture_on_commit_callbacks(execute=True):
        counts = enforce_reclaim_policies(now=now, backend=SLOW)
    assert counts == {"idle_warned": 1, "timeout_stopped": 1, "zombies_removed": 1}

    # The owner sees the warning, the rule and the countdown, on the page and in the API.
    detail = api_client(org.dev_a).get(reverse("gpu-request-detail", args=[notebook.pk])).json()
    assert detail["status"] == "running" and detail["idle_warned_at"]
    shown = page("dev_a", "gpu-request-page", notebook.pk)
    assert 'data-testid="idle-warning"' in shown
    assert 'data-testid="governance-rules"' in shown and "under 5% for 1 h" in shown
    assert 'data-testid="idle-countdown"' in shown and 'data-testid="timeout-countdown"' in shown

    # The job past its max runtime is stopped and its workload deleted.
    job.refresh_from_db()
    assert job.status == RequestStatus.RECLAIMED and "max runtime" in job.status_reason
    assert not SimulatedWorkload.objects.filter(pk=live.pk).exists()
    # The zombie is gone, the notebook's own workload stays.
    assert not SimulatedWorkload.objects.filter(name="gpr-99999-a1").exists()
    assert SimulatedWorkload.objects.filter(request_key=str(notebook.pk)).exists()

    later = now + timedelta(minutes=11)
    with django_capture_on_commit_callbacks(execute=True):
        assert enforce_reclaim_policies(now=later, backend=SLOW) == {"idle_reclaimed": 1}
    notebook.refresh_from_db()
    assert notebook.status == RequestStatus.RECLAIMED
    detail = api_client(org.dev_a).get(reverse("gpu-request-detail", args=[notebook.pk])).json()
    assert detail["status"] == "reclaimed" and "under 5%" in detail["status_reason"]
    shown = page("dev_a", "gpu-request-page", notebook.pk)
    assert "under 5%" in shown  # the reason with its evidence, on the owner's page
    # A notebook is scaled to zero (kept so it can be resumed), no longer running.
    (suspended,) = SimulatedWorkload.objects.filter(request_key=str(notebook.pk))
    assert suspended.failure_reason == SCALED_TO_ZERO and suspended.ends_at <= timezone.now()

    text = metrics()
    for reason in ("idle_warning", "idle", "timeout", "zombie"):
        assert f'gpu_portal_reclamations{{reason="{reason}"}} 1.0' in text
    assert 'gpu_portal_requests{state="reclaimed"} 2.0' in text


def borrow_then_preempt(
    org: Org, fleet: Fleet, drive: Callable[[], cycle.CycleResult]
) -> tuple[GpuRequest, GpuRequest]:
    """Team A runs a borrowed 12-card job; team B's 8-card job then preempts it."""
    Tier.objects.get(slug="training").allowed_teams.add(org.team_b)
    set_quota(actor=org.admin, team=org.team_a, flavor=fleet.a100, guaranteed=4, limit=16)
    set_quota(actor=org.admin, team=org.team_b, flavor=fleet.a100, guaranteed=12, limit=16)
    borrower = GpuRequestFactory.create(
        project=org.project_a,
        flavor=fleet.a100,
        gpu_count=12,
        max_runtime_seconds=6 * 3600,
        priority="low",
        to="queued",
    )
    assert drive().admitted == [borrower.pk]
    SimulatedWorkload.objects.update(ends_at=timezone.now() + timedelta(hours=1))  # keeps running
    execution.sync_workloads(backend=FAST)
    borrower.refresh_from_db()
    assert borrower.status == RequestStatus.RUNNING
    assert Allocation.objects.active().get(request=borrower).is_borrowed

    owner = GpuRequestFactory.create(
        project=org.project_b, flavor=fleet.a100, gpu_count=8, to="queued"
    )
    result = drive()
    assert result.preempted == [borrower.pk] and result.admitted == [owner.pk]
    return borrower, owner


def test_preempted_work_returns_to_the_queue_with_its_age_and_runs_again(
    org: Org, fleet: Fleet, drive: Callable[[], cycle.CycleResult]
) -> None:
    borrower, owner = borrow_then_preempt(org, fleet, drive)
    created = borrower.created_at  # as read while it ran, before the preemption
    borrower.refresh_from_db()
    assert borrower.status == RequestStatus.QUEUED
    assert borrower.created_at == created  # the original age, so it is not sent to the back
    assert not SimulatedWorkload.objects.filter(request_key=str(borrower.pk)).exists()
    text = metrics()
    assert 'gpu_portal_reclamations{reason="preempted"} 1.0' in text
    assert 'gpu_portal_queue_depth{pool="a100-training"} 1.0' in text
    assert 'gpu_portal_queue_wait_seconds_count{pool="a100-training"} 1.0' in text
    team_b, team_a = org.team_b.slug, org.team_a.slug
    assert f'gpu_portal_team_allocated_units{{flavor="a100-80g",team="{team_b}"}} 8.0' in text
    assert (
        f'gpu_portal_team_quota_units{{flavor="a100-80g",kind="guaranteed",team="{team_a}"}} 4.0'
        in text
    )

    # The owner's job ends; the borrower runs again as a new attempt.
    SimulatedWorkload.objects.filter(request_key=str(owner.pk)).update(
        ends_at=timezone.now() - timedelta(seconds=1)
    )
    execution.sync_workloads(backend=FAST)
    owner.refresh_from_db()
    assert owner.status in (RequestStatus.SUCCEEDED, RequestStatus.FAILED)
    assert drive().admitted == [borrower.pk]
    borrower.refresh_from_db()
    assert borrower.attempt == 2
    assert SimulatedWorkload.objects.filter(request_key=str(borrower.pk), attempt=2).exists()
    assert Allocation.objects.filter(request=borrower).count() == 2


def test_preempted_work_past_its_retry_limit_fails_and_its_owner_is_told(
    org: Org, fleet: Fleet, drive: Callable[[], cycle.CycleResult], mailoutbox: list[Any]
) -> None:
    training = Tier.objects.get(slug="training")
    ReclaimPolicy.objects.update_or_create(tier=training, defaults={"max_attempts": 1})
    borrower, _ = borrow_then_preempt(org, fleet, drive)
    borrower.refresh_from_db()
    assert borrower.status == RequestStatus.FAILED
    assert "attempt 1 of 1" in borrower.status_reason
    assert any(str(borrower.pk) in message.subject for message in mailoutbox)
    assert drive().admitted == []  # never comes back by itself
