"""The inbox tells the truth about a request: a preemption, a finish, a decision already made."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from runtime.cluster.simulated import SimulatedCluster
from runtime.services import execution
from scheduling.choices import RequestStatus
from scheduling.models import GpuRequest
from scheduling.services import cycle
from scheduling.services.requests import (
    GpuRequestSpec,
    approve_gpu_request,
    cancel_gpu_request,
    reject_gpu_request,
    submit_gpu_request,
)
from tenants.models import Notification
from tests.scheduling.conftest import Fleet
from tests.scheduling.test_cycle_preemptions import borrowers_then_owners
from tests.support.factories import GpuRequestFactory
from tests.support.personas import Org, make_user

pytestmark = pytest.mark.django_db
FAST = SimulatedCluster(speed=100_000)


def test_a_preempted_owner_hears_that_the_request_is_queued_again(org: Org, fleet: Fleet) -> None:
    borrowers_then_owners(org, fleet, 2)
    result = cycle.run_cycle()
    assert len(result.preempted) == 2
    for pk in result.preempted:
        victim = GpuRequest.objects.get(pk=pk)
        assert victim.status == RequestStatus.QUEUED
        notice = Notification.objects.get(
            recipient=victim.owner, event_type="request.preempted", url__endswith=f"/{pk}/"
        )
        assert notice.subject == f"GPU request {victim.label} was preempted and is queued again"
        assert notice.body.startswith("Preempted for request ") and notice.read_at is None


def test_a_live_job_that_finishes_tells_its_owner(
    org: Org, fleet: Fleet, django_capture_on_commit_callbacks: Any
) -> None:
    request = GpuRequestFactory.create(
        project=org.project_a, flavor=fleet.l4_12g, kind="job", name="resnet sweep"
    )
    admitted: list[tuple[int, int]] = []
    with django_capture_on_commit_callbacks(execute=True):
        cycle.run_cycle(on_admit=lambda r, a: admitted.append((r, a)))
    for request_id, attempt in admitted:
        execution.launch_request(request_id=request_id, attempt=attempt, backend=FAST)
    time.sleep(0.01)
    execution.sync_workloads(backend=FAST)
    request.refresh_from_db()
    assert request.status in (RequestStatus.SUCCEEDED, RequestStatus.FAILED)
    notice = Notification.objects.get(recipient=request.owner, event_type__startswith="request.")
    word = "finished" if request.status == RequestStatus.SUCCEEDED else "failed"
    assert notice.subject == f"GPU request resnet sweep (#{request.pk}) {word}"
    assert notice.event_type == f"request.{request.status}"


def _asked(org: Org, fleet: Fleet) -> tuple[GpuRequest, list[Notification]]:
    """dev_a asks for a whole A100: both of team A's leads are asked to decide."""
    second_lead = make_user("lead_a2", "team_lead", org.team_a)
    request = submit_gpu_request(
        actor=org.dev_a,
        spec=GpuRequestSpec(
            project=org.project_a,
            flavor=fleet.a100,
            gpu_count=1,
            image="registry.example.com/ml/pytorch:2.4",
            max_runtime_seconds=3600,
            name="big run",
        ),
    )
    assert request.status == RequestStatus.PENDING_APPROVAL
    asked = list(Notification.objects.filter(event_type="request.pending_approval"))
    assert {n.recipient for n in asked} == {org.lead_a, second_lead}
    assert all(n.read_at is None for n in asked)
    return request, asked


Decide = Callable[[Org, GpuRequest], Any]
DECISIONS: dict[str, Decide] = {
    "approved": lambda org, r: approve_gpu_request(actor=org.lead_a, request=r),
    "rejected": lambda org, r: reject_gpu_request(actor=org.lead_a, request=r, comment="not now"),
    "cancelled": lambda org, r: cancel_gpu_request(actor=org.dev_a, request=r),
}


@pytest.mark.parametrize("decision", list(DECISIONS))
def test_a_decided_request_leaves_no_lead_asked_to_decide(
    org: Org, fleet: Fleet, decision: str
) -> None:
    request, asked = _asked(org, fleet)
    other = GpuRequestFactory.create(actor=org.dev_a, project=org.project_a, flavor=fleet.a100)
    assert other.status == RequestStatus.PENDING_APPROVAL
    DECISIONS[decision](org, request)
    for notice in asked:
        notice.refresh_from_db()
        assert notice.read_at is not None, (decision, notice.recipient)
    still = Notification.objects.filter(event_type="request.pending_approval", read_at=None)
    assert still.count() == 2  # the other request's, one per lead, untouched
    assert all(n.url.endswith(f"#inbox-approval-{other.pk}") for n in still)
