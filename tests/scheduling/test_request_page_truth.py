"""A waiting request's page says one thing about why it waits, and nothing of an old placement."""

from __future__ import annotations

import html
import re

import pytest
from django.test import Client
from django.urls import reverse

from scheduling.choices import RequestStatus
from scheduling.models import GpuRequest
from scheduling.services import cycle
from scheduling.services.blockers import why_it_waits
from tests.scheduling.conftest import Fleet
from tests.scheduling.test_blockers import run_cycle, submit, waiting_one, whole_pool
from tests.scheduling.test_cycle_preemptions import borrowers_then_owners
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db


def _page(user: object, request: GpuRequest) -> str:
    client = Client()
    client.force_login(user)  # type: ignore[arg-type]
    return client.get(reverse("gpu-request-page", args=[request.pk])).content.decode()


def _text(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def test_a_blocked_request_says_why_once(org: Org) -> None:
    flavor = whole_pool(org, nodes=(4,), guaranteed=16, limit=16)
    first, second = submit(org, flavor, 4), submit(org, flavor, 2)
    run_cycle()
    waiting = waiting_one(first, second)
    waiting.refresh_from_db()
    assert waiting.blocker["code"] == "capacity" and waiting.waiting_reason
    assert waiting.waiting_reason != waiting.blocker["message"]  # two accounts exist to pick from
    page = _page(org.dev_a, waiting)
    head = page.split('data-testid="waiting-reason"')[0].split("</h1>")[1]
    assert "Waiting for the scheduler" not in head  # the stale subtitle above the blocker
    assert 'data-testid="status-reason"' not in head
    assert html.unescape(_text(head)).count(waiting.blocker["message"]) == 1
    line = page.split('data-testid="waiting-reason">')[1].split("</p>")[0]
    assert waiting.waiting_reason not in line  # one reason, the blocker's, not a second one


def test_every_page_gives_a_waiting_request_the_same_one_sentence(org: Org) -> None:
    flavor = whole_pool(org, nodes=(4,), guaranteed=16, limit=16)
    first, second = submit(org, flavor, 4), submit(org, flavor, 2)
    run_cycle()
    waiting = waiting_one(first, second)
    waiting.refresh_from_db()
    why = why_it_waits(waiting)
    assert why == waiting.blocker["message"]
    client = Client()
    client.force_login(org.dev_a)
    for url in (reverse("gpu-request-page", args=[waiting.pk]), reverse("gpu-requests-page")):
        # The request page's history below its facts keeps each move's words, as they were.
        text = html.unescape(_text(client.get(url).content.decode().split('<dl class="row"')[0]))
        assert why[:70] in text, url
        assert waiting.waiting_reason[:40] not in text, url  # the engine's other account
        assert "Waiting for the scheduler" not in text, url
    home = html.unescape(_text(client.get(reverse("home")).content.decode()))
    assert why in home and waiting.waiting_reason not in home


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
