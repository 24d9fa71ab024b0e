"""`GET /api/v1/requests/` answered from the cache: never stale, never another caller's page."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduling import cycle, services
from scheduling.models import GpuRequest
from tenants.choices import Role
from tenants.models import Membership
from tests.scheduling.conftest import Fleet
from tests.scheduling.helpers import request_body
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db
URL = "/api/v1/requests/"


@pytest.fixture(autouse=True)
def _empty_cache() -> None:
    cache.clear()


def listing(client: Any, url: str = URL) -> dict[str, Any]:
    response = client.get(url)
    assert response.status_code == 200, response.content
    body: dict[str, Any] = response.json()
    return body


def statuses(body: dict[str, Any]) -> dict[int, str]:
    return {row["id"]: row["status"] for row in body["results"]}


def submit(user: Any, body: dict[str, Any]) -> int:
    response = api_client(user).post(URL, body, format="json")
    assert response.status_code == 201, response.content
    return int(response.json()["id"])


def fresh_listing(client: Any, settings: Any, url: str = URL) -> dict[str, Any]:
    """The same page computed from the database, the cache switched off."""
    settings.LIST_CACHE_SECONDS = 0
    try:
        return listing(client, url)
    finally:
        settings.LIST_CACHE_SECONDS = 300


def test_a_repeated_page_costs_no_query_and_is_the_same(org: Org, fleet: Fleet) -> None:
    submit(org.dev_a, request_body(org.project_a, fleet.l4_12g, kind="notebook"))
    client = api_client(org.lead_a)
    listing(client)  # verifies the token and starts the team's stamps
    first = listing(client)  # computed and kept
    with CaptureQueriesContext(connection) as captured:
        again = listing(client)
    assert again == first
    assert len(captured) == 0


def test_a_new_request_is_listed_at_once(org: Org, fleet: Fleet) -> None:
    client = api_client(org.dev_a)
    listing(client)
    listing(client)
    created = submit(org.dev_a, request_body(org.project_a, fleet.l4_12g, kind="notebook"))
    assert created in statuses(listing(client))


def test_every_change_of_a_request_shows_on_the_next_call(
    org: Org, fleet: Fleet, settings: Any
) -> None:
    """Submit, the scheduling cycle (bulk writes), cancel, a bulk update: cached equals fresh."""
    lead = api_client(org.lead_a)
    waiting = submit(org.dev_a, request_body(org.project_a, fleet.l4_12g, kind="notebook"))
    listing(lead)
    steps = [
        lambda: submit(org.dev_a, request_body(org.project_a, fleet.l4_12g, kind="notebook")),
        lambda: cycle.run_cycle(),
        lambda: services.cancel_gpu_request(
            actor=org.dev_a, request=GpuRequest.objects.get(pk=waiting), reason="not needed"
        ),
        lambda: GpuRequest.objects.filter(team=org.team_a).update(status_reason="checked"),
    ]
    for step in steps:
        before = listing(lead)
        step()
        after = listing(lead)
        assert after == fresh_listing(lead, settings)
        assert after != before


def test_pages_are_never_shared_between_callers(org: Org, fleet: Fleet) -> None:
    mine = submit(org.dev_a, request_body(org.project_a, fleet.l4_12g, kind="notebook"))
    theirs = submit(org.dev_b, request_body(org.project_b, fleet.l4_12g, kind="notebook"))
    for _ in range(2):  # the second round is served from the cache
        assert set(statuses(listing(api_client(org.dev_a)))) == {mine}
        assert set(statuses(listing(api_client(org.dev_b)))) == {theirs}
        assert set(statuses(listing(api_client(org.lead_b)))) == {theirs}
        assert set(statuses(listing(api_client(org.admin)))) == {mine, theirs}
        assert statuses(listing(api_client(org.finance))) == {}


def test_a_filter_is_part_of_the_page(org: Org, fleet: Fleet) -> None:
    submit(org.dev_a, request_body(org.project_a, fleet.l4_12g, kind="notebook"))
    client = api_client(org.dev_a)
    for _ in range(2):
        assert listing(client, URL + "?status=queued")["count"] == 1
        assert listing(client, URL + "?status=running")["count"] == 0


def test_a_new_role_changes_the_page_at_once(org: Org, fleet: Fleet) -> None:
    others = submit(org.lead_a, request_body(org.project_a, fleet.l4_12g, kind="notebook"))
    client = api_client(org.dev_a)
    listing(client)
    assert others not in statuses(listing(client))
    membership = Membership.objects.get(user=org.dev_a, team=org.team_a)
    membership.role = Role.TEAM_LEAD
    membership.save()
    assert others in statuses(listing(client))
    membership.delete()
    assert listing(client)["count"] == 0


def test_a_lost_stamp_is_a_miss_not_an_old_page(org: Org, fleet: Fleet) -> None:
    """Writes that bypass the ORM are not seen; losing the stamps (Redis restarted) must not
    bring back a page stored under them."""
    created = submit(org.dev_a, request_body(org.project_a, fleet.l4_12g, kind="notebook"))
    client = api_client(org.dev_a)
    listing(client)
    assert statuses(listing(client))[created] == "queued"
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE scheduling_gpurequest SET status = 'cancelled' WHERE id = %s", [created]
        )
    assert statuses(listing(client))[created] == "queued"  # the stamp is unchanged: cached
    cache.delete_many([key for key in _stamp_keys(org)])
    assert statuses(listing(client))[created] == "cancelled"


def _stamp_keys(org: Org) -> list[str]:
    from scheduling.models import REQUESTS_DATA
    from tenants.data_versions import ALL_TEAMS, stamp_key

    return [stamp_key(REQUESTS_DATA, team) for team in (org.team_a.pk, ALL_TEAMS)]


def test_an_update_of_one_teams_requests_widened_by_or_renews_every_team(
    org: Org, fleet: Fleet
) -> None:
    from scheduling.models import REQUESTS_DATA
    from tenants.data_versions import stamp_key

    mine = submit(org.dev_a, request_body(org.project_a, fleet.l4_12g, kind="notebook"))
    theirs = submit(org.dev_b, request_body(org.project_b, fleet.l4_6g, kind="notebook"))
    their_stamp = stamp_key(REQUESTS_DATA, org.team_b.pk)
    before = cache.get(their_stamp)

    widened = GpuRequest.objects.filter(pk=mine).of_team(org.team_a.pk) | (
        GpuRequest.objects.filter(pk=theirs)
    )
    assert widened.update(reason="both") == 2

    assert cache.get(their_stamp) != before
