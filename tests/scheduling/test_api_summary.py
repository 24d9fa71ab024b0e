"""`GET /api/v1/requests/summary/`: dashboard counters that never mix tenants, even cached."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.cache import caches

from tests.scheduling.conftest import Fleet
from tests.scheduling.helpers import request_body
from tests.support.factories import api_submit
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db
URL = "/api/v1/requests/summary/"


@pytest.fixture(autouse=True)
def _empty_cache() -> None:
    caches["local"].clear()


def summary(user: Any) -> dict[str, Any]:
    response = api_client(user).get(URL)
    assert response.status_code == 200, response.content
    body: dict[str, Any] = response.json()
    return body


def test_summary_counts_only_the_callers_tenant_even_from_the_cache(org: Org, fleet: Fleet) -> None:
    api_submit(org.dev_a, request_body(org.project_a, fleet.l4_12g, kind="notebook"))
    api_submit(org.dev_a, request_body(org.project_a, fleet.l4_12g, kind="notebook"))
    api_submit(org.dev_b, request_body(org.project_b, fleet.l4_12g, kind="notebook"))
    assert summary(org.lead_a)["total"] == 2
    assert summary(org.lead_b)["total"] == 1  # asked after team A's answer was cached
    assert summary(org.dev_b)["by_status"]["queued"] == 1
    assert summary(org.admin)["total"] == 3
    assert summary(org.finance)["total"] == 0


def test_a_developer_sees_only_their_own_requests_in_the_summary(org: Org, fleet: Fleet) -> None:
    from tenants.choices import Role
    from tests.support.personas import make_user

    other = make_user("dev_a2", Role.DEVELOPER, org.team_a)
    api_submit(org.dev_a, request_body(org.project_a, fleet.l4_12g, kind="notebook"))
    assert summary(other)["total"] == 0
    assert summary(org.dev_a)["total"] == 1
    assert summary(org.lead_a)["total"] == 1


def test_summary_needs_a_signed_in_caller() -> None:
    assert api_client(None).get(URL).status_code in (401, 403)
