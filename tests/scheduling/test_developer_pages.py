"""The developer's pages: dashboard counts, the queued request's reason and start estimate,
the form's warnings before submit, the flash after it, the request's cost and its history."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounting.choices import OverBudgetPolicy
from accounting.models import Price
from scheduling.choices import RequestStatus
from scheduling.engine.types import Reservation, Waiting
from scheduling.models import Allocation, GpuRequest, Quota
from scheduling.services import cycle
from scheduling.services.lifecycle import NEXT_CYCLE_REASON
from tests.scheduling.conftest import Fleet
from tests.scheduling.test_pages import form_data
from tests.support.factories import GpuRequestFactory
from tests.support.personas import Org

pytestmark = pytest.mark.django_db


def login(user: object) -> Client:
    client = Client()
    client.force_login(user)  # type: ignore[arg-type]
    return client


def test_dashboard_counts_requests_waiting_for_approval(org: Org, fleet: Fleet) -> None:
    GpuRequestFactory.create(project=org.project_a, flavor=fleet.a100, actor=org.dev_a)
    GpuRequestFactory.create(project=org.project_a, flavor=fleet.a100, actor=org.dev_a)
    page = login(org.dev_a).get(reverse("home")).content.decode()
    assert 'data-testid="awaiting-approval-count">2<' in page
    assert "whole cards in this tier" in page  # why a lead decides


def test_a_queued_request_has_a_reason_before_the_first_cycle(org: Org, fleet: Fleet) -> None:
    response = login(org.dev_a).post(reverse("gpu-request-new"), form_data(org, fleet), follow=True)
    created = GpuRequest.objects.get()
    assert created.status == RequestStatus.QUEUED
    assert created.waiting_reason == NEXT_CYCLE_REASON
    assert 'data-testid="waiting-reason"' in response.content.decode()


def test_the_cycle_stores_the_wait_code_and_the_reservation_start(org: Org, fleet: Fleet) -> None:
    queued = GpuRequestFactory.create(project=org.project_a, flavor=fleet.l4_6g)
    start = timezone.now() + timedelta(minutes=40)
    waiting = Waiting(str(queued.pk), "no room; capacity reserved", "reserved", 1)
    reservation = Reservation(str(queued.pk), start.timestamp(), ())
    cycle._record_waiting((waiting,), (reservation,))  # noqa: SLF001 - our own helper
    queued.refresh_from_db()
    assert queued.waiting_code == "reserved"
    assert queued.reserved_start_at is not None
    assert abs((queued.reserved_start_at - start).total_seconds()) < 1
    GpuRequest.objects.filter(pk=queued.pk).update(
        estimated_start_at=start, estimate_low_at=start, estimate_high_at=start
    )
    page = login(org.dev_a).get(reverse("home")).content.decode()
    estimate = page[page.index('data-testid="estimated-start"') :]
    assert estimate.index("likely to start around") < estimate.index("</td>")
    assert f'datetime="{start.isoformat()}"' in estimate


def test_a_request_without_an_estimate_gives_its_reason_and_no_time(org: Org, fleet: Fleet) -> None:
    queued = GpuRequestFactory.create(project=org.project_a, flavor=fleet.l4_6g)
    GpuRequest.objects.filter(pk=queued.pk).update(
        waiting_code="quota", waiting_reason="team quota for L4 is in use"
    )
    # The team's quota was cut meanwhile: no forecast sees it start.
    Quota.objects.filter(team=org.team_a, flavor=fleet.l4_6g).update(guaranteed=0, limit=0)
    page = login(org.dev_a).get(reverse("gpu-request-page", args=[queued.pk])).content.decode()
    assert "team quota for L4 is in use" in page
    assert 'data-testid="estimated-start"' not in page


def test_the_estimate_warns_when_a_lead_or_a_budget_will_hold_it(
    org: Org, fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = login(org.dev_a)
    url = reverse("request-estimate")
    page = client.get(url, {"project": org.project_a.pk, "flavor": fleet.a100.pk}).content
    assert b'data-testid="needs-approval"' in page and b"whole cards in this tier" in page
    page = client.get(url, {"project": org.project_a.pk, "flavor": fleet.l4_6g.pk}).content
    assert b'data-testid="auto-approved"' in page
    monkeypatch.setattr(
        "accounting.services.budgets.exhausted_policy", lambda **_: OverBudgetPolicy.APPROVAL
    )
    page = client.get(url, {"project": org.project_a.pk, "flavor": fleet.l4_6g.pk}).content
    assert b"the budget is used up this month" in page
    assert b'data-testid="budget-note"' in page


def test_the_flash_does_not_contradict_the_badge(org: Org, fleet: Fleet) -> None:
    client = login(org.dev_a)
    page = client.post(
        reverse("gpu-request-new"),
        form_data(org, fleet, flavor=fleet.a100.pk, kind="job"),
        follow=True,
    ).content.decode()
    assert "waits for your team lead&#x27;s approval" in page
    assert ">Pending approval</span>" in page
    response = client.post(reverse("gpu-request-new"), form_data(org, fleet), follow=True)
    text = response.content.decode()
    assert "submitted and approved at once" in text
    assert " is Queued" not in text


def test_the_request_page_shows_cost_so_far_and_projected(org: Org, fleet: Fleet) -> None:
    Price.objects.create(
        flavor=fleet.l4_6g,
        price_per_hour=Decimal("2"),
        currency="EUR",
        effective_from=timezone.now() - timedelta(days=1),
    )
    running = GpuRequestFactory.create(project=org.project_a, flavor=fleet.l4_6g, to="running")
    Allocation.objects.filter(request=running).update(
        started_at=timezone.now() - timedelta(minutes=30)
    )
    fragment = login(org.dev_a).get(reverse("gpu-request-efficiency-page", args=[running.pk]))
    page = fragment.content.decode()
    # Half an hour at 2 EUR/h so far; its max runtime is an hour, so 2 EUR in all.
    assert 'data-testid="cost-so-far">1.00 EUR' in page
    assert 'data-testid="cost-projected">2.00 EUR' in page


def test_history_shows_words_not_event_codes(org: Org, fleet: Fleet) -> None:
    queued = GpuRequestFactory.create(project=org.project_a, flavor=fleet.l4_6g)
    page = login(org.dev_a).get(reverse("gpu-request-page", args=[queued.pk])).content.decode()
    history = page[page.index('data-testid="history"') :]
    assert "<strong>Submitted</strong>" in history and "<strong>Queued</strong>" in history
    assert "<strong>request." not in history


def test_a_developer_sees_why_approval_is_blocked(org: Org, fleet: Fleet) -> None:
    from scheduling.models import Quota

    Quota.objects.filter(team=org.team_a, flavor=fleet.a100, project__isnull=True).update(
        guaranteed=1, limit=2
    )
    pending = GpuRequestFactory.create(project=org.project_a, flavor=fleet.a100, gpu_count=2)
    GpuRequestFactory.create(project=org.project_a, flavor=fleet.a100, to="queued")
    page = login(org.dev_a).get(reverse("gpu-request-page", args=[pending.pk])).content.decode()
    assert "cannot approve it yet" in page and "1 must free up first" in page


def test_flavor_options_filter_by_card_kind(org: Org, fleet: Fleet) -> None:
    client = login(org.dev_a)
    url = reverse("gpu-request-form-flavors")
    vgpu = client.get(
        url, {"project": str(org.project_a.pk), "flavor_kind": "vgpu"}
    ).content.decode()
    assert fleet.l4_6g.name in vgpu and fleet.a100.name not in vgpu
    assert fleet.mig_1g.name not in vgpu
    whole = client.get(
        url, {"project": str(org.project_a.pk), "flavor_kind": "whole"}
    ).content.decode()
    assert fleet.a100.name in whole and fleet.l4_6g.name not in whole
    form = client.get(reverse("gpu-request-new")).content.decode()
    assert 'data-testid="flavor-kind"' in form
