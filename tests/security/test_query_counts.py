"""No N+1 queries: a list endpoint's query count does not grow with the number of rows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from tenants.models import Membership, Project
from tests.scheduling.conftest import Fleet
from tests.support.factories import GpuRequestFactory
from tests.support.personas import Org, api_client, make_user

pytestmark = pytest.mark.django_db


def queries_for(client: Any, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url, {"page_size": 200})
    assert response.status_code == 200, response.content
    return len(captured)


def grow_requests(org: Org, fleet: Fleet, n: int) -> None:
    GpuRequestFactory.create_batch(n, project=org.project_a, flavor=fleet.l4_6g)


def grow_projects(org: Org, fleet: Fleet, n: int) -> None:
    start = Project.objects.count()
    for i in range(n):
        Project.objects.create(team=org.team_a, name=f"P{start + i}", slug=f"p-{start + i}")


def grow_members(org: Org, fleet: Fleet, n: int) -> None:
    start = Membership.objects.count()
    for i in range(n):
        make_user(f"member{start + i}", "developer", org.team_a)


GROWERS: dict[str, Callable[[Org, Fleet, int], None]] = {
    "gpu-request-list": grow_requests,
    "project-list": grow_projects,
    "membership-list": grow_members,
    "audit-event-list": grow_requests,
    "quota-list": grow_requests,
}


@pytest.mark.parametrize("route", sorted(GROWERS))
def test_list_query_count_is_flat(org: Org, fleet: Fleet, route: str) -> None:
    client = api_client(org.admin)
    client.get(reverse("me"))  # the token is verified once; later calls recall it from the cache
    url = reverse(route)
    GROWERS[route](org, fleet, 2)
    few = queries_for(client, url)
    GROWERS[route](org, fleet, 10)
    many = queries_for(client, url)
    assert many == few, f"{route}: {few} queries for a few rows, {many} for more"


@pytest.mark.parametrize("route", ["pool-list", "flavor-list", "team-list"])
def test_catalogue_lists_are_flat(org: Org, fleet: Fleet, route: str) -> None:
    client = api_client(org.admin)
    first = queries_for(client, reverse(route))
    # Six for any list; the flavor list one more, prefetching every flavor's other pools.
    assert first <= (7 if route == "flavor-list" else 6)
