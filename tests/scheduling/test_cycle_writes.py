"""The cycle's write step: admissions in batches, a plan dropped when the lease was lost."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduling.choices import RequestStatus
from scheduling.engine import planner
from scheduling.engine.planner import plan
from scheduling.models import Allocation, GpuRequest, Node, Quota, SchedulerLease
from scheduling.services import cycle
from scheduling.services.lifecycle import Move, transition, transition_many
from tenants.models import AuditEvent
from tests.scheduling.conftest import Fleet
from tests.support.factories import GpuRequestFactory
from tests.support.personas import Org

pytestmark = pytest.mark.django_db


def queued(org: Org, fleet: Fleet, count: int) -> list[GpuRequest]:
    return GpuRequestFactory.create_batch(
        count, project=org.project_a, flavor=fleet.l4_12g, kind="job"
    )


def test_transition_many_moves_each_request_once_and_audits_each(org: Org, fleet: Fleet) -> None:
    requests = queued(org, fleet, 5)
    assert {r.status for r in requests} == {RequestStatus.QUEUED}
    stale = GpuRequest.objects.get(pk=requests[2].pk)
    transition(stale, RequestStatus.CANCELLED, actor=org.dev_a, reason="changed my mind")

    moved = transition_many(
        requests, Move(RequestStatus.ADMITTED, "Admitted."), next_attempt=True, batch_size=2
    )

    assert sorted(r.pk for r in moved) == sorted(r.pk for r in requests if r is not requests[2])
    rows = dict(GpuRequest.objects.values_list("pk", "status"))
    assert rows[requests[2].pk] == RequestStatus.CANCELLED
    for request in moved:
        fresh = GpuRequest.objects.get(pk=request.pk)
        assert (fresh.status, fresh.attempt, request.attempt) == (RequestStatus.ADMITTED, 1, 1)
        assert fresh.status_reason == "Admitted."
    admitted_events = AuditEvent.objects.filter(action="request.admitted")
    assert sorted(int(e.target_id) for e in admitted_events) == sorted(r.pk for r in moved)


def test_transition_many_refuses_requests_of_different_statuses(org: Org, fleet: Fleet) -> None:
    first, second = queued(org, fleet, 2)
    transition(second, RequestStatus.CANCELLED, actor=org.dev_a)
    with pytest.raises(ValueError, match="share a status"):
        transition_many([first, second], Move(RequestStatus.ADMITTED))


def test_cycle_admits_the_whole_plan_with_one_allocation_each(org: Org, fleet: Fleet) -> None:
    requests = queued(org, fleet, 3)
    result = cycle.run_cycle()
    assert result.ran and sorted(result.admitted) == sorted(r.pk for r in requests)
    for request in requests:
        allocation = Allocation.objects.get(request=request)
        assert (
            allocation.attempt == 1 and allocation.claims and allocation.pool == fleet.l4_12g.pool
        )


def test_a_request_cancelled_while_the_cycle_plans_is_not_admitted(
    org: Org, fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    keep, cancel = queued(org, fleet, 2)
    real_plan = plan

    def plan_then_cancel(*args: Any, **kwargs: Any) -> Any:
        planned = real_plan(*args, **kwargs)
        transition(GpuRequest.objects.get(pk=cancel.pk), RequestStatus.CANCELLED, actor=org.dev_a)
        return planned

    monkeypatch.setattr(planner, "plan", plan_then_cancel)
    result = cycle.run_cycle()
    assert result.admitted == [keep.pk]
    assert not Allocation.objects.filter(request=cancel).exists()
    assert GpuRequest.objects.get(pk=cancel.pk).status == RequestStatus.CANCELLED


def test_a_plan_is_dropped_when_the_lease_was_taken_over_while_planning(
    org: Org, fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cycle slower than its lease must not write next to the cycle that took the lease over:
    both would hand out the same GPUs."""
    requests = queued(org, fleet, 2)
    real_plan = plan

    def plan_slowly(*args: Any, **kwargs: Any) -> Any:
        planned = real_plan(*args, **kwargs)
        SchedulerLease.objects.filter(name=cycle.LEASE_NAME).update(
            holder="another-host:ns:1:cafe", expires_at=timezone.now() + timedelta(seconds=60)
        )
        return planned

    monkeypatch.setattr(planner, "plan", plan_slowly)
    result = cycle.run_cycle()
    assert not result.ran and result.admitted == []
    assert not Allocation.objects.exists()
    assert {GpuRequest.objects.get(pk=r.pk).status for r in requests} == {RequestStatus.QUEUED}
    # The other cycle's lease is left alone.
    assert SchedulerLease.objects.get(name=cycle.LEASE_NAME).holder == "another-host:ns:1:cafe"


def test_a_second_cycle_with_nothing_new_writes_no_waiting_reasons(
    org: Org, fleet: Fleet, django_assert_max_num_queries: Any
) -> None:
    """Reasons and positions are written when they change, not on every cycle."""
    for _ in range(2):
        GpuRequestFactory(
            project=org.project_a, flavor=fleet.a100, kind="job", gpu_count=4, to="queued"
        )
    Node.objects.filter(pool=fleet.a100.pool).update(is_schedulable=False)
    cycle.run_cycle()
    waiting = dict(
        GpuRequest.objects.filter(status=RequestStatus.QUEUED).values_list("pk", "waiting_reason")
    )
    assert waiting and all(waiting.values())
    updated: list[str] = []
    with django_assert_max_num_queries(50) as queries:
        cycle.run_cycle()
    updated = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("UPDATE")]
    assert not any('"waiting_reason"' in sql for sql in updated), updated
    assert (
        dict(
            GpuRequest.objects.filter(status=RequestStatus.QUEUED).values_list(
                "pk", "waiting_reason"
            )
        )
        == waiting
    )


def test_a_quota_wait_names_the_team_and_the_flavor(org: Org, fleet: Fleet) -> None:
    """The reason a developer reads names the flavor, not a database id."""
    # Nobody holds guaranteed 6 GiB shares, so there is nothing in the cohort to borrow.
    Quota.objects.filter(flavor=fleet.l4_6g).update(guaranteed=0)
    GpuRequestFactory(project=org.project_b, flavor=fleet.l4_6g, kind="job", to="queued")
    cycle.run_cycle()
    reason = GpuRequest.objects.get(status=RequestStatus.QUEUED).waiting_reason
    assert f"team {org.team_b.slug} is over its guaranteed {fleet.l4_6g.slug} quota" in reason


def test_admitting_more_requests_sends_no_more_statements(org: Org, fleet: Fleet) -> None:
    """The admissions read only what they write; a field left out would cost one statement
    per admitted request."""

    def admit(count: int) -> int:
        requests = queued(org, fleet, count)
        with CaptureQueriesContext(connection) as statements:
            result = cycle.run_cycle()
        assert sorted(result.admitted) == sorted(r.pk for r in requests)
        return len(statements)

    admit(1)  # the first cycle also creates the scheduling lease
    few, more = admit(1), admit(4)
    assert more == few
    events = AuditEvent.objects.filter(action="request.admitted")
    assert events.count() == 6
    assert set(events.values_list("team", "project")) == {(org.team_a.pk, org.project_a.pk)}
    allocations = Allocation.objects.filter(request__status=RequestStatus.ADMITTED)
    assert {a.pool_id for a in allocations} == {fleet.l4_12g.pool_id}
