"""The cycle's preemptions are written in batches: the statements do not grow with the victims."""

from __future__ import annotations

from typing import Any

import pytest

from scheduling.choices import RequestStatus
from scheduling.models import Allocation, GpuRequest, Tier
from scheduling.services import cycle
from scheduling.services.lifecycle import transition
from scheduling.services.quotas import set_quota
from tenants.models import AuditEvent
from tests.scheduling.conftest import Fleet
from tests.support.factories import GpuRequestFactory
from tests.support.personas import Org

pytestmark = pytest.mark.django_db

# Statements of a cycle that preempts: the lease, the snapshot, the victims' three reads, and a
# fixed number per batch of 500 (lock, update, audit events, allocations), admissions included.
# 30 on PostgreSQL and 31 on SQLite for 2 and for 12 victims alike (one at a time: ~7 a victim).
MAX_QUERIES = 40


def borrowers_then_owners(org: Org, fleet: Fleet, owners: int) -> list[GpuRequest]:
    """Team A fills the 16 A100 cards (12 of them borrowed, at low priority); then team B asks
    for `owners` cards within its guarantee. Returns team A's requests."""
    Tier.objects.get(slug="training").allowed_teams.add(org.team_b)
    set_quota(actor=org.admin, team=org.team_a, flavor=fleet.a100, guaranteed=4, limit=16)
    set_quota(actor=org.admin, team=org.team_b, flavor=fleet.a100, guaranteed=12, limit=16)
    borrowers = GpuRequestFactory.create_batch(
        16, project=org.project_a, flavor=fleet.a100, priority="low", to="queued"
    )
    assert len(cycle.run_cycle().admitted) == 16
    GpuRequestFactory.create_batch(owners, project=org.project_b, flavor=fleet.a100, to="queued")
    return borrowers


@pytest.mark.parametrize("owners", [2, 12])
def test_a_cycle_preempts_many_victims_in_a_bounded_number_of_statements(
    org: Org,
    fleet: Fleet,
    owners: int,
    django_assert_max_num_queries: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    borrowers_then_owners(org, fleet, owners)
    preempted: list[tuple[int, int]] = []
    with (
        django_capture_on_commit_callbacks(execute=True),
        django_assert_max_num_queries(MAX_QUERIES),
    ):
        result = cycle.run_cycle(on_preempt=lambda r, a: preempted.append((r, a)))

    assert len(result.preempted) == owners and len(result.admitted) == owners
    assert sorted(preempted) == sorted((pk, 1) for pk in result.preempted)
    for pk in result.preempted:
        victim = GpuRequest.objects.get(pk=pk)
        assert (victim.status, victim.status_reason) == (
            RequestStatus.QUEUED,
            "Requeued after preemption.",
        )
        assert victim.finished_at is None and victim.queue_position is None
        allocation = Allocation.objects.get(request=victim)
        assert allocation.ended_at is not None and allocation.end_reason == "preempted"
        events = AuditEvent.objects.filter(target_id=str(pk)).order_by("pk")
        actions = [e.action for e in events][-2:]
        assert actions == ["request.preempted", "request.queued"]
        preempted_event = events.get(action="request.preempted")
        assert preempted_event.message.startswith("Preempted for request ")
        assert preempted_event.data["from"] == RequestStatus.ADMITTED


def test_a_victim_cancelled_while_the_cycle_plans_is_left_cancelled(
    org: Org, fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    borrowers_then_owners(org, fleet, 2)
    real_plan = cycle.planner.plan
    cancelled: list[int] = []

    def plan_then_cancel(*args: Any, **kwargs: Any) -> Any:
        planned = real_plan(*args, **kwargs)
        victim = GpuRequest.objects.get(pk=int(planned.preemptions[0].victim_id))
        transition(victim, RequestStatus.CANCELLED, actor=victim.owner)  # allocation kept
        cancelled.append(victim.pk)
        return planned

    monkeypatch.setattr(cycle.planner, "plan", plan_then_cancel)
    result = cycle.run_cycle()
    assert cancelled and cancelled[0] not in result.preempted
    assert GpuRequest.objects.get(pk=cancelled[0]).status == RequestStatus.CANCELLED
    assert not AuditEvent.objects.filter(
        target_id=str(cancelled[0]), action="request.preempted"
    ).exists()
