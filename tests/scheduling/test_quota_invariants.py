"""Quota limits hold under concurrency (PostgreSQL) and under any sequence of actions."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection, connections
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduling.choices import (
    CANCELLABLE_STATUSES,
    COMMITTED_STATUSES,
    TRANSITIONS,
    RequestStatus,
)
from scheduling.models import ApprovalRule, GpuRequest, Quota
from scheduling.selectors.quotas import committed_units
from scheduling.services.requests import approve_gpu_request, cancel_gpu_request, reject_gpu_request
from tenants.errors import DomainError
from tests.scheduling.conftest import Fleet
from tests.support.factories import GpuRequestFactory
from tests.support.personas import Org


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="row locks need PostgreSQL; set DATABASE_URL"
)
def test_parallel_approvals_never_pass_the_quota_limit(org: Org, fleet: Fleet) -> None:
    ApprovalRule.objects.update(auto_approve_within_guaranteed=False)
    limit = Quota.objects.get(team=org.team_a, project=None, flavor=fleet.l4_12g).limit
    four_units = {"project": org.project_a, "flavor": fleet.l4_12g, "gpu_count": 4}
    pending = GpuRequestFactory.create_batch(8, **four_units)  # 32 units asked, 16 allowed
    barrier = threading.Barrier(len(pending))
    outcomes: list[str] = []

    def approve(request: GpuRequest) -> None:
        try:
            barrier.wait()
            approve_gpu_request(actor=org.lead_a, request=request)
            outcomes.append("approved")
        except DomainError as error:
            outcomes.append(error.code)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=approve, args=(request,)) for request in pending]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert outcomes.count("approved") == limit // 4
    assert outcomes.count("quota_exceeded") == len(pending) - limit // 4
    assert committed_units(flavor=fleet.l4_12g, team=org.team_a) == limit


def _refusal_allowed(
    action: str, code: str, status: str, gpu_count: int, used: int, limit: int
) -> str | None:
    """Why a lead's or owner's action may be refused here (None: the refusal is a bug).

    * approve: the request is no longer pending approval (and not approved already, which is
      a harmless repeat), or approving it would take the team past its limit;
    * reject: only a pending request can be rejected;
    * cancel: the request has ended, so it can no longer be cancelled.
    """
    if action == "approve":
        if code == "quota_exceeded" and status == RequestStatus.PENDING_APPROVAL:
            return "over the limit" if used + gpu_count > limit else None
        if code == "illegal_transition" and status not in (
            RequestStatus.PENDING_APPROVAL, RequestStatus.APPROVED, RequestStatus.QUEUED,
        ):  # fmt: skip
            return "not pending"
    if action == "reject" and code == "illegal_transition":
        return "not pending" if RequestStatus.REJECTED not in TRANSITIONS[status] else None
    if action == "cancel" and code == "illegal_transition":
        ended = status not in CANCELLABLE_STATUSES and status != RequestStatus.CANCELLED
        return "ended" if ended else None
    return None


ACTIONS = st.lists(
    st.tuples(
        st.sampled_from(["submit", "approve", "reject", "cancel"]),
        st.integers(min_value=1, max_value=6),  # units to submit / which request to act on
        st.sampled_from(["normal", "high"]),
    ),
    min_size=1,
    max_size=25,
)


@pytest.mark.django_db
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(actions=ACTIONS)
def test_any_sequence_of_actions_keeps_states_legal_and_quota_within_limit(
    org: Org, fleet: Fleet, actions: list[tuple[str, int, str]]
) -> None:
    from django.db import transaction

    savepoint = transaction.savepoint()
    try:
        quota = Quota.objects.get(team=org.team_a, project=None, flavor=fleet.l4_12g)
        history: dict[int, list[str]] = {}
        for action, number, priority in actions:
            requests = list(GpuRequest.objects.order_by("id"))
            target: Any = requests[number % len(requests)] if requests else None
            status_before = target.status if target is not None else None
            used_before = committed_units(flavor=fleet.l4_12g, team=org.team_a)
            try:
                if action == "submit":
                    made = GpuRequestFactory.create(
                        project=org.project_a,
                        flavor=fleet.l4_12g,
                        gpu_count=number,
                        max_runtime_seconds=600,
                        priority=priority,
                    )
                    history[made.pk] = [RequestStatus.PENDING_APPROVAL]
                elif target is not None and action == "approve":
                    approve_gpu_request(actor=org.lead_a, request=target)
                elif target is not None and action == "reject":
                    reject_gpu_request(actor=org.lead_a, request=target, comment="no")
                elif target is not None and action == "cancel":
                    cancel_gpu_request(actor=org.dev_a, request=target)
            except DomainError as error:
                assert target is not None, f"{action} refused without a target: {error}"
                why = _refusal_allowed(
                    action, error.code, str(status_before), target.gpu_count,
                    used_before, quota.limit,
                )  # fmt: skip
                assert why, f"{action} of a {status_before} request refused: {error.code}"
                # A refused action leaves everything as it was.
                target.refresh_from_db()
                assert target.status == status_before
                assert committed_units(flavor=fleet.l4_12g, team=org.team_a) == used_before
            for request in GpuRequest.objects.all():
                states = history.setdefault(request.pk, [RequestStatus.PENDING_APPROVAL])
                if states[-1] != request.status:
                    states.append(request.status)
            used = committed_units(flavor=fleet.l4_12g, team=org.team_a)
            assert used <= quota.limit
        for states in history.values():
            for before, after in zip(states, states[1:], strict=False):
                # Approve moves through approved to queued inside one service call.
                assert after in TRANSITIONS[before] or (
                    before == RequestStatus.PENDING_APPROVAL and after == RequestStatus.QUEUED
                ), states
        committed = GpuRequest.objects.filter(status__in=COMMITTED_STATUSES)
        assert all(r.status in {RequestStatus.QUEUED} for r in committed)
    finally:
        transaction.savepoint_rollback(savepoint)
