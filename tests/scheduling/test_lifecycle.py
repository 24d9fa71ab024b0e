"""The lifecycle's compare-and-set moves, alone and several at once, and what a submission
reads to decide its first moves."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduling.choices import RequestStatus
from scheduling.models import ApprovalRule, GpuRequest
from scheduling.services.lifecycle import Move, transition, transition_through
from scheduling.services.requests import approve_gpu_request, reject_gpu_request
from tenants.errors import ConflictError
from tenants.models import AuditEvent
from tests.scheduling.conftest import Fleet
from tests.scheduling.helpers import request_body
from tests.support.factories import GpuRequestFactory, api_submit
from tests.support.personas import Org

pytestmark = pytest.mark.django_db


def pending(org: Org, fleet: Fleet) -> GpuRequest:
    request = GpuRequestFactory.create(project=org.project_a, flavor=fleet.a100)
    assert request.status == RequestStatus.PENDING_APPROVAL
    return request


def events(request: GpuRequest) -> list[tuple[str, int | None, dict[str, str]]]:
    rows = AuditEvent.objects.filter(target_type="GpuRequest", target_id=str(request.pk))
    return [
        (event.action, event.actor_id, event.data)
        for event in rows.order_by("id")
        if event.action != "request.submitted"
    ]


def test_several_moves_are_one_update_and_each_is_audited(org: Org, fleet: Fleet) -> None:
    request = pending(org, fleet)
    with CaptureQueriesContext(connection) as captured:
        moved = transition_through(
            request,
            [
                Move(RequestStatus.APPROVED, "Looks right.", org.lead_a),
                Move(RequestStatus.QUEUED, "Waiting for the scheduler."),
            ],
            approved_by=org.lead_a,
        )
    assert moved
    updates = [q for q in captured if q["sql"].startswith('UPDATE "scheduling_gpurequest"')]
    assert len(updates) == 1

    stored = GpuRequest.objects.get(pk=request.pk)
    assert (stored.status, stored.status_reason) == ("queued", "Waiting for the scheduler.")
    assert stored.approved_by == org.lead_a
    assert stored.approved_at is not None and stored.queued_at is not None
    assert (request.status, request.approved_at) == (stored.status, stored.approved_at)
    assert events(request) == [
        ("request.approved", org.lead_a.pk, {"from": "pending_approval", "to": "approved"}),
        ("request.queued", None, {"from": "approved", "to": "queued"}),
    ]


def test_a_chain_with_an_illegal_step_changes_nothing(org: Org, fleet: Fleet) -> None:
    request = pending(org, fleet)
    with pytest.raises(ConflictError) as refused:
        transition_through(
            request,
            [Move(RequestStatus.APPROVED), Move(RequestStatus.RUNNING)],  # running skips queued
        )
    assert refused.value.code == "illegal_transition"
    assert GpuRequest.objects.get(pk=request.pk).status == RequestStatus.PENDING_APPROVAL
    assert events(request) == []


def test_a_chain_already_made_elsewhere_reports_no_move(org: Org, fleet: Fleet) -> None:
    request = pending(org, fleet)
    stale = GpuRequest.objects.get(pk=request.pk)
    approve_gpu_request(actor=org.lead_a, request=request)  # another process's move
    audited = events(request)

    moved = transition_through(
        stale, [Move(RequestStatus.APPROVED), Move(RequestStatus.QUEUED)], approved_by=None
    )

    assert not moved
    assert stale.status == RequestStatus.QUEUED  # read back from the database
    assert GpuRequest.objects.get(pk=request.pk).approved_by == org.lead_a
    assert events(request) == audited


def test_a_chain_overtaken_by_another_move_is_a_conflict(org: Org, fleet: Fleet) -> None:
    request = pending(org, fleet)
    stale = GpuRequest.objects.get(pk=request.pk)
    reject_gpu_request(actor=org.lead_a, request=request, comment="Not now.")

    with pytest.raises(ConflictError):
        transition_through(stale, [Move(RequestStatus.APPROVED), Move(RequestStatus.QUEUED)])
    assert GpuRequest.objects.get(pk=request.pk).status == RequestStatus.REJECTED


def test_a_single_move_repeated_is_no_move(org: Org, fleet: Fleet) -> None:
    request = pending(org, fleet)
    assert transition(request, RequestStatus.CANCELLED, actor=org.dev_a, reason="Not needed.")
    assert not transition(request, RequestStatus.CANCELLED, actor=org.dev_a)
    assert [action for action, _, _ in events(request)] == ["request.cancelled"]


def test_a_submission_reads_the_tiers_approval_rule_with_the_flavor(org: Org, fleet: Fleet) -> None:
    with CaptureQueriesContext(connection) as captured:
        request_id = api_submit(org.dev_a, request_body(org.project_a, fleet.l4_12g)).json()["id"]
    statements = [query["sql"] for query in captured]
    assert GpuRequest.objects.get(pk=request_id).status == RequestStatus.QUEUED  # the rule ran
    assert not [sql for sql in statements if 'FROM "scheduling_approvalrule"' in sql]


def test_a_tier_without_a_rule_leaves_every_request_to_the_lead(org: Org, fleet: Fleet) -> None:
    ApprovalRule.objects.filter(tier=fleet.l4_12g.pool.tier).delete()
    request_id = api_submit(org.dev_a, request_body(org.project_a, fleet.l4_12g)).json()["id"]
    assert GpuRequest.objects.get(pk=request_id).status == RequestStatus.PENDING_APPROVAL


def _all_events(request_id: int) -> list[tuple[str, int | None, dict[str, object]]]:
    rows = AuditEvent.objects.filter(target_type="GpuRequest", target_id=str(request_id))
    return [(event.action, event.actor_id, event.data) for event in rows.order_by("id")]


def test_a_submission_approved_at_once_is_inserted_queued(org: Org, fleet: Fleet) -> None:
    with CaptureQueriesContext(connection) as captured:
        request_id = api_submit(org.dev_a, request_body(org.project_a, fleet.l4_12g)).json()["id"]
    statements = [query["sql"] for query in captured]

    request_writes = [
        sql.split()[0]
        for sql in statements
        if sql.startswith(('INSERT INTO "scheduling_gpurequest"', 'UPDATE "scheduling_gpurequest"'))
    ]
    assert request_writes == ["INSERT"]
    audit_inserts = [sql for sql in statements if sql.startswith('INSERT INTO "tenants_audit')]
    assert len(audit_inserts) == 1
    stored = GpuRequest.objects.get(pk=request_id)
    assert (stored.status, stored.status_reason) == ("queued", "Waiting for the scheduler.")
    assert stored.approved_at is not None and stored.queued_at is not None
    assert stored.approved_by is None
    submitted = {"status": "pending_approval", "flavor": fleet.l4_12g.pk, "gpu_count": 1}
    assert _all_events(request_id) == [
        ("request.submitted", org.dev_a.pk, submitted),
        ("request.approved", None, {"from": "pending_approval", "to": "approved"}),
        ("request.queued", None, {"from": "approved", "to": "queued"}),
    ]


def test_a_submission_left_to_the_lead_is_one_insert_with_its_reason(
    org: Org, fleet: Fleet
) -> None:
    ApprovalRule.objects.filter(tier=fleet.l4_12g.pool.tier).delete()
    with CaptureQueriesContext(connection) as captured:
        request_id = api_submit(org.dev_a, request_body(org.project_a, fleet.l4_12g)).json()["id"]
    statements = [query["sql"] for query in captured]

    assert not [sql for sql in statements if sql.startswith('UPDATE "scheduling_gpurequest"')]
    stored = GpuRequest.objects.get(pk=request_id)
    assert stored.status == RequestStatus.PENDING_APPROVAL
    assert stored.needs_lead_approval_because
    assert stored.status_reason == f"Waiting for a team lead: {stored.needs_lead_approval_because}."
    assert [action for action, _, _ in _all_events(request_id)] == ["request.submitted"]
