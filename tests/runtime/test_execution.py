"""The pipeline in one process: cycle → launch → sync on the simulated cluster."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from runtime.cluster.simulated import EXIT_CODES, SimulatedCluster
from runtime.models import SimulatedWorkload
from runtime.selectors import workloads
from runtime.services import execution
from scheduling.choices import RequestStatus
from scheduling.models import Allocation, GpuRequest, SchedulerLease
from scheduling.selectors.queue import fill_queue_positions
from scheduling.services import cycle
from scheduling.services.quotas import set_quota
from scheduling.services.requests import approve_gpu_request, cancel_gpu_request
from tests.scheduling.conftest import Fleet
from tests.support.factories import GpuRequestFactory
from tests.support.personas import Org
from tests.support.polling import wait_until

pytestmark = pytest.mark.django_db
FAST = SimulatedCluster(speed=100_000)  # starts within 0.2 ms, runs for at most 3 ms


@pytest.fixture
def pipeline(django_capture_on_commit_callbacks: Any) -> Callable[[], cycle.CycleResult]:
    """One cycle, then the launches it queued (the tests' transaction never commits)."""

    def run() -> cycle.CycleResult:
        admitted: list[tuple[int, int]] = []
        with django_capture_on_commit_callbacks(execute=True):
            result = cycle.run_cycle(on_admit=lambda r, a: admitted.append((r, a)))
        for request_id, attempt in admitted:
            execution.launch_request(request_id=request_id, attempt=attempt, backend=FAST)
        return result

    return run


def test_queued_request_is_admitted_placed_launched_and_finishes(
    org: Org, fleet: Fleet, pipeline: Callable[[], cycle.CycleResult]
) -> None:
    request = GpuRequestFactory.create(project=org.project_a, flavor=fleet.l4_12g, kind="job")
    result = pipeline()
    assert result.ran and result.admitted == [request.pk]
    request.refresh_from_db()
    assert (request.status, request.attempt) == (RequestStatus.LAUNCHING, 1)
    allocation = Allocation.objects.get(request=request)
    (claim,) = allocation.claims
    assert claim["node"].startswith("l4-vgpu-") and claim["memory_mib"] == 12288
    workload = SimulatedWorkload.objects.get()
    assert workload.name == f"gpr-{request.pk}-a1"

    # The simulated run's outcome is drawn at launch: a job that fails exits with its reason.
    expected = RequestStatus.FAILED if workload.fails else RequestStatus.SUCCEEDED

    def ended() -> bool:
        execution.sync_workloads(backend=FAST)
        request.refresh_from_db()
        return request.status in (RequestStatus.SUCCEEDED, RequestStatus.FAILED)

    wait_until(ended, timeout=10, what=f"request {request.pk} ends")
    assert request.status == expected
    allocation.refresh_from_db()
    assert allocation.started_at is not None and allocation.ended_at is not None
    # The container's exit code is kept: 0, or the failure's (1 for Error, 137 for OOMKilled,
    # none for a pod that never ran its container).
    exit_code = EXIT_CODES.get(workload.failure_reason) if workload.fails else 0
    assert allocation.exit_code == exit_code


def test_a_second_launch_of_the_same_attempt_creates_nothing_new(
    org: Org, fleet: Fleet, pipeline: Callable[[], cycle.CycleResult]
) -> None:
    request = GpuRequestFactory.create(project=org.project_a, flavor=fleet.l4_6g)
    pipeline()
    execution.launch_request(request_id=request.pk, attempt=1, backend=FAST)
    assert SimulatedWorkload.objects.count() == 1


def test_launch_of_a_cancelled_request_is_stale(org: Org, fleet: Fleet) -> None:
    request = GpuRequestFactory.create(project=org.project_a, flavor=fleet.l4_6g)
    admitted: list[tuple[int, int]] = []
    cycle.run_cycle(on_admit=lambda r, a: admitted.append((r, a)))
    cancel_gpu_request(actor=org.dev_a, request=GpuRequest.objects.get(pk=request.pk))
    assert execution.launch_request(request_id=request.pk, attempt=1, backend=FAST) == "stale"
    assert not SimulatedWorkload.objects.exists()
    assert not Allocation.objects.active().exists()


def test_full_pool_leaves_work_waiting_with_a_reason_and_position(
    org: Org, fleet: Fleet, pipeline: Callable[[], cycle.CycleResult]
) -> None:
    # Guaranteed beyond the pool: the second request waits for cards, not for quota.
    set_quota(actor=org.admin, team=org.team_a, flavor=fleet.a100, guaranteed=32, limit=32)
    first = GpuRequestFactory.create(project=org.project_a, flavor=fleet.a100, gpu_count=16)
    approve_gpu_request(actor=org.lead_a, request=first)
    second = GpuRequestFactory.create(project=org.project_a, flavor=fleet.a100, gpu_count=8)
    approve_gpu_request(actor=org.lead_a, request=second)
    pipeline()
    second.refresh_from_db()
    fill_queue_positions([second])
    assert second.status == RequestStatus.QUEUED
    assert second.queue_position == 1
    assert second.waiting_reason


def test_only_one_cycle_runs_at_a_time(org: Org, fleet: Fleet) -> None:
    holder = cycle.acquire_lease()
    assert holder is not None
    assert cycle.run_cycle().ran is False
    cycle.release_lease(holder)
    assert cycle.run_cycle().ran is True
    assert SchedulerLease.objects.count() == 1


def test_an_expired_lease_is_taken_over(org: Org, fleet: Fleet) -> None:
    assert cycle.acquire_lease(seconds=-1) is not None  # a holder that died
    assert cycle.run_cycle().ran is True


def test_stuck_launches_are_found(org: Org, fleet: Fleet) -> None:
    request = GpuRequestFactory.create(project=org.project_a, flavor=fleet.l4_6g)
    cycle.run_cycle()
    assert workloads.stuck_requests(older_than_seconds=3600) == []
    GpuRequest.objects.filter(pk=request.pk).update(
        updated_at=request.updated_at.replace(year=2020)
    )
    assert workloads.stuck_requests(older_than_seconds=60) == [(request.pk, 1)]


def test_project_spec_mirrors_quota_limits_and_sets_default_container_limits(
    org: Org, fleet: Fleet
) -> None:
    request = GpuRequestFactory.create(project=org.project_a, flavor=fleet.l4_6g)
    spec = execution.project_spec(request)
    assert spec.namespace == "gpu-team-a-a-one"
    # Team A's limits: A100 16, L4 12G 16 + L4 6G 16 (both nvidia.com/gpu), MIG 1g 14 and 3g 4.
    assert spec.quota["requests.nvidia.com/gpu"] == 16 + 16 + 16
    assert spec.quota["requests.nvidia.com/mig-1g.10gb"] == 14
    # vGPU memory and cores: as much as the quota's GPU-equivalents can hold, on 24 GiB cards
    # (L4 12G: 16 x 0.5, L4 6G: 16 x 0.25 GPU-equivalents).
    assert spec.quota["requests.nvidia.com/gpumem"] == (8 + 4) * 24576
    assert spec.quota["requests.nvidia.com/gpucores"] == (8 + 4) * 100
    assert spec.limit_range.default_requests["cpu"] == "1"
