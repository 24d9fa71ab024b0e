"""The lead's inbox: approvals and asks with cost and quota impact, bulk decisions, and
approving a request to run when quota frees."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounting.models import Price
from scheduling.choices import RequestStatus
from scheduling.models import GpuRequest, Quota
from scheduling.services.governance import ask_lead
from scheduling.services.requests import approve_deferred_requests, cancel_gpu_request
from tests.scheduling.conftest import Fleet
from tests.support.cross_tenant import covers
from tests.support.factories import GpuRequestFactory
from tests.support.personas import Org

pytestmark = pytest.mark.django_db


def login(user: object) -> Client:
    client = Client()
    client.force_login(user)  # type: ignore[arg-type]
    return client


def priced(fleet: Fleet, per_hour: str) -> None:
    Price.objects.create(
        flavor=fleet.a100,
        price_per_hour=Decimal(per_hour),
        currency="EUR",
        effective_from=timezone.now() - timedelta(days=1),
    )


def test_inbox_shows_approvals_and_asks_with_cost_and_quota_impact(org: Org, fleet: Fleet) -> None:
    priced(fleet, "3")
    pending = GpuRequestFactory.create(project=org.project_a, flavor=fleet.a100, gpu_count=2)
    running = GpuRequestFactory.create(project=org.project_a, flavor=fleet.l4_6g, to="running")
    ask_lead(actor=org.dev_a, request=running, about="extension", reason="one more epoch")
    page = login(org.lead_a).get(reverse("approvals-page")).content.decode()
    row = page[page.index(f'id="inbox-approval-{pending.pk}"') :]
    # 2 GPUs × 3 EUR/h × the 1 h max runtime; quota in use goes from 0 to 2.
    assert "6.00 EUR" in row[: row.index("</tr>")]
    assert "0 → <strong>2</strong>" in row[: row.index("</tr>")]
    ask = page[page.index(f'id="inbox-extension-{running.pk}"') :]
    assert "one more epoch" in ask[: ask.index("</tr>")]


def test_an_answered_ask_leaves_the_inbox(org: Org, fleet: Fleet) -> None:
    running = GpuRequestFactory.create(project=org.project_a, flavor=fleet.l4_6g, to="running")
    ask_lead(actor=org.dev_a, request=running, about="idle_exemption", reason="debug")
    client = login(org.lead_a)
    response = client.post(
        reverse("gpu-request-govern-page", args=[running.pk, "idle-exemption"]),
        {"amount": "2", "text": "fine", "next": "approvals"},
    )
    assert response.status_code == 302
    assert response["Location"] == reverse("approvals-page")
    page = client.get(reverse("approvals-page")).content.decode()
    assert f'id="inbox-idle_exemption-{running.pk}"' not in page


def test_bulk_approve_and_reject(org: Org, fleet: Fleet) -> None:
    first, second, third = (
        GpuRequestFactory.create(project=org.project_a, flavor=fleet.a100) for _ in range(3)
    )
    client = login(org.lead_a)
    response = client.post(
        reverse("approvals-bulk"), {"decision": "approve", "ids": [first.pk, second.pk]}
    )
    assert response.status_code == 302
    rejected = client.post(
        reverse("approvals-bulk"),
        {"decision": "reject", "ids": [third.pk], "comment": "not this week"},
        follow=True,
    )
    assert f"Rejected 1: #{third.pk}" in rejected.content.decode()
    statuses = dict(GpuRequest.objects.values_list("pk", "status"))
    assert statuses[first.pk] != RequestStatus.PENDING_APPROVAL
    assert statuses[second.pk] != RequestStatus.PENDING_APPROVAL
    assert statuses[third.pk] == RequestStatus.REJECTED


@covers("approvals-bulk")
def test_bulk_decisions_leave_other_teams_requests_alone(org: Org, fleet: Fleet) -> None:
    theirs = GpuRequestFactory.create(project=org.project_a, flavor=fleet.a100)
    login(org.lead_b).post(reverse("approvals-bulk"), {"decision": "approve", "ids": [theirs.pk]})
    theirs.refresh_from_db()
    assert theirs.status == RequestStatus.PENDING_APPROVAL


def test_approve_to_run_when_quota_frees(org: Org, fleet: Fleet) -> None:
    Quota.objects.filter(team=org.team_a, flavor=fleet.a100, project__isnull=True).update(
        guaranteed=1, limit=1
    )
    holder = GpuRequestFactory.create(project=org.project_a, flavor=fleet.a100, to="queued")
    waiting = GpuRequestFactory.create(project=org.project_a, flavor=fleet.a100)
    client = login(org.lead_a)
    page = client.get(reverse("approvals-page")).content.decode()
    assert 'data-testid="blocked"' in page and 'data-testid="defer"' in page
    row = client.post(
        reverse("approval-decide", args=[waiting.pk, "defer"]), HTTP_HX_REQUEST="true"
    )
    assert row.status_code == 200 and 'data-testid="deferred"' in row.content.decode()
    waiting.refresh_from_db()
    assert waiting.status == RequestStatus.PENDING_APPROVAL  # the limit is never passed
    assert 'data-testid="deferred"' in client.get(reverse("approvals-page")).content.decode()
    assert approve_deferred_requests() == 0  # still no room
    cancel_gpu_request(actor=org.dev_a, request=holder)
    assert approve_deferred_requests() == 1
    waiting.refresh_from_db()
    assert waiting.status == RequestStatus.QUEUED and waiting.approved_by == org.lead_a


def test_lead_dashboard_counts_open_asks_beside_approvals(org: Org, fleet: Fleet) -> None:
    GpuRequestFactory.create(project=org.project_a, flavor=fleet.a100)
    running = GpuRequestFactory.create(project=org.project_a, flavor=fleet.l4_6g, to="running")
    ask_lead(actor=org.dev_a, request=running, about="extension", reason="more epochs")
    page = login(org.lead_a).get(reverse("home")).content.decode()
    assert 'data-testid="pending-approvals">1<' in page
    assert 'data-testid="open-asks">1<' in page


def a100_quota(org: Org, fleet: Fleet, *, guaranteed: int, limit: int) -> None:
    Quota.objects.filter(team=org.team_a, flavor=fleet.a100, project__isnull=True).update(
        guaranteed=guaranteed, limit=limit
    )


def impact_cell(page: str, pk: int) -> str:
    row = page[page.index(f'id="inbox-approval-{pk}"') :]
    row = row[: row.index("</tr>")]
    return row[row.index('data-testid="quota-impact"') :]


def test_quota_impact_counts_the_rows_above_in_queue_order(org: Org, fleet: Fleet) -> None:
    a100_quota(org, fleet, guaranteed=5, limit=8)
    GpuRequestFactory.create(project=org.project_a, flavor=fleet.a100, gpu_count=2, to="queued")
    first, second, third = (
        GpuRequestFactory.create(project=org.project_a, flavor=fleet.a100, gpu_count=2)
        for _ in range(3)
    )
    page = login(org.lead_a).get(reverse("approvals-page")).content.decode()
    assert "2 → <strong>4</strong> of 8" in impact_cell(page, first.pk)
    assert 'data-testid="borrows"' not in impact_cell(page, first.pk)
    assert "4 → <strong>6</strong> of 8" in impact_cell(page, second.pk)
    assert "counting 2 asked in the rows above" in impact_cell(page, second.pk)
    assert 'data-testid="borrows"' in impact_cell(page, second.pk)  # 6 > guaranteed 5
    assert "6 → <strong>8</strong> of 8" in impact_cell(page, third.pk)
    assert 'data-testid="over-after-above"' not in impact_cell(page, third.pk)


def test_a_row_that_fits_alone_but_not_after_the_rows_above_is_flagged(
    org: Org, fleet: Fleet
) -> None:
    a100_quota(org, fleet, guaranteed=2, limit=3)
    first = GpuRequestFactory.create(project=org.project_a, flavor=fleet.a100, gpu_count=2)
    second = GpuRequestFactory.create(project=org.project_a, flavor=fleet.a100, gpu_count=2)
    page = login(org.lead_a).get(reverse("approvals-page")).content.decode()
    assert 'data-testid="over-after-above"' not in impact_cell(page, first.pk)
    flagged = impact_cell(page, second.pk)
    assert "2 → <strong>4</strong> of 3" in flagged
    assert 'data-testid="over-after-above"' in flagged
    assert 'data-testid="blocked"' not in flagged  # alone it fits: Approve stays offered


def test_bulk_approve_over_quota_offers_and_performs_run_when_quota_frees(
    org: Org, fleet: Fleet
) -> None:
    a100_quota(org, fleet, guaranteed=2, limit=2)
    fits, over = (
        GpuRequestFactory.create(project=org.project_a, flavor=fleet.a100, gpu_count=2)
        for _ in range(2)
    )
    client = login(org.lead_a)
    page = client.get(reverse("approvals-page")).content.decode()
    assert 'data-testid="bulk-defer"' in page
    refused = client.post(
        reverse("approvals-bulk"), {"decision": "approve", "ids": [fits.pk, over.pk]}, follow=True
    ).content.decode()
    assert f"Approved 1: #{fits.pk}." in refused
    assert f"Not approved, over the quota limit: #{over.pk}." in refused
    assert "run when quota frees" in refused
    deferred = client.post(
        reverse("approvals-bulk"), {"decision": "defer", "ids": [over.pk]}, follow=True
    ).content.decode()
    assert f"Approved to run when quota frees 1: #{over.pk}." in deferred
    over.refresh_from_db()
    assert over.status == RequestStatus.PENDING_APPROVAL  # the limit is never passed
    detail = login(org.dev_a).get(reverse("gpu-request-page", args=[over.pk])).content.decode()
    assert 'data-testid="deferred-reason"' in detail and "lead_a" in detail
    fits.refresh_from_db()
    cancel_gpu_request(actor=org.dev_a, request=fits)
    assert approve_deferred_requests() == 1
    over.refresh_from_db()
    assert over.status == RequestStatus.QUEUED


def test_bulk_with_an_unknown_decision_is_a_message_not_an_error(org: Org, fleet: Fleet) -> None:
    pending = GpuRequestFactory.create(project=org.project_a, flavor=fleet.a100)
    response = login(org.lead_a).post(
        reverse("approvals-bulk"), {"decision": "maybe", "ids": [pending.pk]}, follow=True
    )
    assert response.status_code == 200
    assert "Choose approve, reject, or approve to run when quota frees." in (
        response.content.decode()
    )
    pending.refresh_from_db()
    assert pending.status == RequestStatus.PENDING_APPROVAL


@covers("approvals-bulk")
def test_bulk_run_when_quota_frees_leaves_other_teams_requests_alone(
    org: Org, fleet: Fleet
) -> None:
    theirs = GpuRequestFactory.create(project=org.project_a, flavor=fleet.a100)
    login(org.lead_b).post(reverse("approvals-bulk"), {"decision": "defer", "ids": [theirs.pk]})
    theirs.refresh_from_db()
    assert theirs.status == RequestStatus.PENDING_APPROVAL
    assert approve_deferred_requests() == 0


def test_rejecting_a_row_reloads_the_inbox_so_the_rows_below_recount(
    org: Org, fleet: Fleet
) -> None:
    a100_quota(org, fleet, guaranteed=8, limit=8)
    first, second = (
        GpuRequestFactory.create(project=org.project_a, flavor=fleet.a100, gpu_count=2)
        for _ in range(2)
    )
    client = login(org.lead_a)
    assert "2 → <strong>4</strong>" in impact_cell(
        client.get(reverse("approvals-page")).content.decode(), second.pk
    )
    rejected = client.post(
        reverse("approval-decide", args=[first.pk, "reject"]),
        {"comment": "not now"},
        HTTP_HX_REQUEST="true",
    )
    assert rejected["HX-Refresh"] == "true"
    page = client.get(reverse("approvals-page")).content.decode()
    assert "0 → <strong>2</strong>" in impact_cell(page, second.pk)


def test_a_row_swapped_after_a_decision_keeps_the_queue_count(org: Org, fleet: Fleet) -> None:
    a100_quota(org, fleet, guaranteed=2, limit=3)
    GpuRequestFactory.create(project=org.project_a, flavor=fleet.a100, gpu_count=2)
    second = GpuRequestFactory.create(project=org.project_a, flavor=fleet.a100, gpu_count=2)
    refused = login(org.lead_a).post(
        reverse("approval-decide", args=[second.pk, "reject"]), HTTP_HX_REQUEST="true"
    )  # no comment: refused, the row stays pending
    row = refused.content.decode()
    assert 'role="alert"' in row
    assert "2 → <strong>4</strong> of 3" in row and 'data-testid="over-after-above"' in row
