"""A submission and an approval cost a fixed number of statements and after-commit messages,
however many members, requests and webhooks the team has (docs/benchmarks.md, "Where a create
and an approval spend their time")."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from scheduling.choices import RequestStatus
from scheduling.models import Quota
from tenants.choices import Role
from tenants.models import Membership, Webhook
from tests.scheduling.conftest import Fleet
from tests.scheduling.helpers import request_body
from tests.support.factories import GpuRequestFactory
from tests.support.personas import Org, api_client, make_user

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="counts PostgreSQL's statements; DATABASE_URL"
    ),
]

# Statements of each call, the token check (3) and the caller's memberships (1) included:
# a create approved at once 13, one that waits for a lead 16 (its leads, their notification
# settings and their inbox), an approval 13 (the lookup, the locked re-read, the quota, the move,
# its audit, the owner's notification settings and inbox).
MOST_STATEMENTS = {"create": 13, "create_pending": 16, "approve": 13}


def grow_team(org: Org, fleet: Fleet, *, size: int) -> None:
    """Team A gets `size` members (half of the new ones leads), `size` requests of its own
    and `size` active webhooks."""
    members = Membership.objects.filter(team=org.team_a).count()
    for number in range(members, size):
        role = Role.TEAM_LEAD if number % 2 else Role.DEVELOPER
        make_user(f"member{number}", role, org.team_a)
    for number in range(Webhook.objects.count(), size):
        Webhook.objects.create(name=f"hook {number}", url=f"https://hooks.example.com/{number}")
    for _ in range(org.team_a.gpu_requests.count(), size):
        GpuRequestFactory.create(project=org.project_a, flavor=fleet.l4_12g, actor=org.dev_a)


def costs(org: Org, fleet: Fleet, capture_on_commit: Any) -> dict[str, tuple[int, int]]:
    """(statements, after-commit callbacks) of a create approved at once, a create that waits
    for a lead and the lead's approval of it, each through the API."""
    developer, lead = api_client(org.dev_a), api_client(org.lead_a)
    found: dict[str, tuple[int, int]] = {}

    def post(name: str, client: Any, path: str, body: dict[str, Any]) -> dict[str, Any]:
        with (
            capture_on_commit(execute=False) as callbacks,
            CaptureQueriesContext(connection) as queries,
        ):
            response = client.post(path, body, format="json")
        assert response.status_code in (200, 201), response.content
        # The test's own transaction turns the service's into a savepoint: not counted.
        statements = [q for q in queries if "SAVEPOINT" not in q["sql"]]
        found[name] = (len(statements), len(callbacks))
        return dict(response.json())

    created = post(
        "create", developer, reverse("gpu-request-list"), request_body(org.project_a, fleet.l4_12g)
    )
    assert created["status"] == RequestStatus.QUEUED
    pending = post(
        "create_pending",
        developer,
        reverse("gpu-request-list"),
        request_body(org.project_a, fleet.a100),
    )
    assert pending["status"] == RequestStatus.PENDING_APPROVAL
    approved = post(
        "approve", lead, reverse("gpu-request-approve", args=[pending["id"]]), {"comment": "ok"}
    )
    assert approved["status"] == RequestStatus.QUEUED
    return found


def test_a_submission_and_an_approval_cost_the_same_queries_however_big_the_team(
    org: Org, fleet: Fleet, django_capture_on_commit_callbacks: Any
) -> None:
    # Room for every request of the larger team within the guaranteed share, so that both
    # sizes take the same path (approved at once).
    Quota.objects.filter(team=org.team_a, flavor=fleet.l4_12g).update(guaranteed=500, limit=500)
    measured = {}
    for size in (2, 40):
        grow_team(org, fleet, size=size)
        measured[size] = costs(org, fleet, django_capture_on_commit_callbacks)
    assert Membership.objects.filter(team=org.team_a).count() >= 40
    assert org.team_a.gpu_requests.count() >= 40
    assert measured[2] == measured[40]
    for name, (statements, callbacks) in measured[40].items():
        assert statements <= MOST_STATEMENTS[name], (name, statements)
        # The scheduling cycle and one task for the notice's email and every webhook.
        assert callbacks <= 2, (name, callbacks)
