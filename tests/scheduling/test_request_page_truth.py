"""A waiting request's page says one thing about why it waits, and nothing of an old placement."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from scheduling.choices import RequestStatus
from scheduling.models import GpuRequest
from scheduling.services import cycle
from tests.scheduling.conftest import Fleet
from tests.scheduling.test_blockers import run_cycle, submit, waiting_one, whole_pool
from tests.scheduling.test_cycle_preemptions import borrowers_then_owners
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db


def _page(user: object, request: GpuRequest) -> str:
    client = Client()
    client.force_login(user)  # type: ignore[arg-type]
    return client.get(reverse("gpu-request-page", args=[request.pk])).content.decode()


def test_a_blocked_request_says_why_once(org: Org) -> None:
    flavor = whole_pool(org, nodes=(4,), guaranteed=16, limit=16)
    first, second = submit(org, flavor, 4), submit(org, flavor, 2)
    run_cycle()
    waiting = waiting_one(first, second)
    waiting.refresh_from_db()
    assert waiting.blocker["code"] == "capacity" and waiting.waiting_reason
    page = _page(org.dev_a, waiting)
    head = page.split('data-testid="waiting-reason"')[0].split("</h1>")[1]
    assert "Waiting for the scheduler" not in head  # the stale subtitle above the blocker
    assert 'data-testid="status-reason"' not in head
    assert waiting.blocker["message"].split(";")[0] in page
    line = page.split('data-testid="waiting-reason">')[1].split("</p>")[0]
    assert waiting.waiting_reason not in line  # one reason, the blocker's, not a second one


def test_a_preempted_request_back_in_the_queue_shows_no_old_node_or_pod(
    org: Org, fleet: Fleet
) -> None:
    borrowers_then_owners(org, fleet, 2)
    result = cycle.run_cycle()
    victim = GpuRequest.objects.get(pk=result.preempted[0])
    assert victim.status == RequestStatus.QUEUED
    old = victim.allocations.get()
    assert old.node_name and old.ended_at is not None
    body = api_client(victim.owner).get(reverse("gpu-request-detail", args=[victim.pk])).json()
    assert body["node_names"] == [] and body["pod_names"] == []
    client = Client()
    client.force_login(victim.owner)
    panel = client.get(reverse("gpu-request-inspect-page", args=[victim.pk])).content.decode()
    assert old.node_name not in panel and 'data-testid="workload-facts"' not in panel
