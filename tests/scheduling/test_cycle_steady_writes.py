"""A steady cycle writes what changed since the last one, and positions stay truthful.

The queue's positions are counted from stored ranks when read, so a cancellation near the head
moves everyone behind it up without a row written for them (scheduling/services/queue_ranks.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connection
from django.urls import reverse

from scheduling.choices import RequestStatus
from scheduling.models import GpuRequest, Node, Quota
from scheduling.services import cycle
from scheduling.services.requests import cancel_gpu_request
from tests.scheduling.conftest import Fleet
from tests.support.factories import GpuRequestFactory
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db
on_postgresql = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="counts PostgreSQL's rows written"
)
QUEUE_LENGTH = 30


def waiting_queue(org: Org, fleet: Fleet, count: int = QUEUE_LENGTH) -> list[GpuRequest]:
    """`count` queued requests that cannot start (their pool's nodes are cordoned), ranked by
    a first cycle."""
    Quota.objects.filter(team=org.team_a, flavor=fleet.a100).update(limit=4 * (count + 1))
    requests = [new_arrival(org, fleet) for _ in range(count)]
    Node.objects.filter(pool=fleet.a100.pool).update(is_schedulable=False)
    cycle.run_cycle()
    return requests


def new_arrival(org: Org, fleet: Fleet) -> GpuRequest:
    """A request that joins the queue; submission checks the pool's schedulable cards, so its
    nodes are open while it is submitted and cordoned again after."""
    nodes = Node.objects.filter(pool=fleet.a100.pool)
    cordoned = not nodes.filter(is_schedulable=True).exists()
    nodes.update(is_schedulable=True)
    request = GpuRequestFactory.create(
        project=org.project_a, flavor=fleet.a100, kind="job", gpu_count=4, to="queued"
    )
    nodes.update(is_schedulable=not cordoned)
    return request


@contextmanager
def request_rows_written() -> Iterator[list[int]]:
    """Counts the rows of GPU requests the statements inside update (one number each)."""
    written: list[int] = []

    def count(execute: Callable[..., Any], sql: str, *args: Any) -> Any:
        result = execute(sql, *args)
        if sql.startswith('UPDATE "scheduling_gpurequest"'):
            written.append(int(args[-1]["cursor"].rowcount))
        return result

    with connection.execute_wrapper(count):
        yield written


def positions(org: Org) -> dict[int, int | None]:
    """Each queued request's position as the API shows it to its owner."""
    response = api_client(org.dev_a).get(reverse("gpu-request-list"), {"status": "queued"})
    assert response.status_code == 200
    body = response.json()
    return {row["id"]: row["queue_position"] for row in body.get("results", body)}


@on_postgresql
def test_a_cycle_with_nothing_new_writes_no_request_rows(org: Org, fleet: Fleet) -> None:
    waiting_queue(org, fleet)
    with request_rows_written() as written:
        result = cycle.run_cycle()
    assert result.ran and result.waiting == QUEUE_LENGTH
    assert sum(written) == 0


@on_postgresql
def test_a_cycle_after_one_cancellation_and_one_arrival_writes_only_the_arrival(
    org: Org, fleet: Fleet
) -> None:
    requests = waiting_queue(org, fleet)
    cancel_gpu_request(actor=org.dev_a, request=GpuRequest.objects.get(pk=requests[0].pk))
    arrival = new_arrival(org, fleet)
    with request_rows_written() as written:
        cycle.run_cycle()
    # The arrival's reason and rank, then its blocker; no row behind the cancelled head.
    assert sum(written) == 2
    assert GpuRequest.objects.get(pk=arrival.pk).queue_rank is not None


def test_positions_follow_the_queue_without_a_cycle_rewriting_them(org: Org, fleet: Fleet) -> None:
    requests = waiting_queue(org, fleet, count=4)
    shown = positions(org)
    assert sorted(shown.values()) == [1, 2, 3, 4]  # type: ignore[type-var]
    head = min(shown, key=lambda pk: shown[pk] or 0)
    cancel_gpu_request(actor=org.dev_a, request=GpuRequest.objects.get(pk=head))
    after = positions(org)
    assert sorted(after.values()) == [1, 2, 3]  # type: ignore[type-var]
    assert all(after[pk] == (shown[pk] or 0) - 1 for pk in after)
    # A new request has no place until a cycle ranks it; then it is last.
    arrival = new_arrival(org, fleet)
    assert positions(org)[arrival.pk] is None
    cycle.run_cycle()
    assert positions(org)[arrival.pk] == 4
    assert {r.pk for r in requests} - {head} <= set(after)


def test_the_request_page_shows_the_counted_position(org: Org, fleet: Fleet) -> None:
    first, second = waiting_queue(org, fleet, count=2)
    cancel_gpu_request(actor=org.dev_a, request=GpuRequest.objects.get(pk=first.pk))
    client = api_client(org.dev_a)
    client.force_login(org.dev_a)
    page = client.get(reverse("gpu-request-page", args=[second.pk])).content.decode()
    assert "Position 1 in the queue" in page
    assert GpuRequest.objects.get(pk=second.pk).status == RequestStatus.QUEUED


def test_a_request_over_its_team_limit_has_no_place_in_the_queue(org: Org, fleet: Fleet) -> None:
    """It waits for its team's usage to drop, not for its turn: no rank, no position, and the
    requests waiting for capacity are counted without it."""
    blocked = GpuRequestFactory.create(
        project=org.project_b, flavor=fleet.l4_6g, kind="job", to="queued"
    )
    Quota.objects.filter(team=org.team_b, flavor=fleet.l4_6g).update(guaranteed=0, limit=0)
    waiting_queue(org, fleet, count=2)
    row = GpuRequest.objects.get(pk=blocked.pk)
    assert row.waiting_code == "quota" and "limit" in row.waiting_reason
    assert row.queue_rank is None
    assert sorted(positions(org).values()) == [1, 2]  # type: ignore[type-var]
