"""The role matrix: each privileged action, each role that must be refused (table-driven).

A role that cannot see the object at all gets 404 (isolation); a role that sees it but may not
act gets 403. Web pages a role has no use for answer 404 (the page is hidden, like an object).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from scheduling.models import GpuRequest, Quota
from tests.scheduling.conftest import Fleet
from tests.scheduling.helpers import request_body
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db


@dataclass(frozen=True)
class Case:
    what: str
    call: Callable[[Any, Org, Fleet, dict[str, Any]], Any]
    refused: dict[str, int]  # persona → the status it must get
    allowed: tuple[str, ...] = ()  # personas that succeed (proves the refusal is about the role)


def _api(method: str, route: str, *, body: Any = None, pk: str | None = None) -> Any:
    def call(user: Any, org: Org, fleet: Fleet, ids: dict[str, Any]) -> Any:
        kwargs = {"pk": ids[pk]} if pk else {}
        payload = body(org, fleet) if callable(body) else (body or {})
        return getattr(api_client(user), method)(
            reverse(route, kwargs=kwargs), payload, format="json"
        )

    return call


def _page(route: str) -> Any:
    def call(user: Any, org: Org, fleet: Fleet, ids: dict[str, Any]) -> Any:
        client = Client()
        client.force_login(user)
        return client.get(reverse(route))

    return call


def _quota_body(org: Org, fleet: Fleet) -> dict[str, Any]:
    return {"team": org.team_a.pk, "flavor": fleet.l4_6g.pk, "guaranteed": 1, "limit": 2}


CASES = [
    Case(
        "approve a request",
        _api("post", "gpu-request-approve", pk="request"),
        {"dev_a": 403, "finance": 404, "nobody": 404},
        ("lead_a",),
    ),
    Case(
        "reject a request",
        _api("post", "gpu-request-reject", body={"comment": "no"}, pk="request"),
        {"dev_a": 403, "finance": 404, "nobody": 404},
    ),
    Case(
        "create a quota",
        _api("post", "quota-list", body=_quota_body),
        {"dev_a": 403, "lead_a": 403, "finance": 403},
        ("admin",),
    ),
    Case(
        "change a quota",
        _api("patch", "quota-detail", body={"limit": 50}, pk="quota"),
        {"dev_a": 403, "lead_a": 403, "finance": 404},
        ("admin",),
    ),
    Case(
        "create a team",
        _api("post", "team-list", body={"name": "New", "slug": "new"}),
        {"dev_a": 403, "lead_a": 403, "finance": 403},
        ("admin",),
    ),
    Case(
        "read the audit trail",
        _api("get", "audit-event-list"),
        {"dev_a": 403, "finance": 403, "nobody": 403},
        ("lead_a", "admin"),
    ),
    Case(
        "read the chargeback report",
        _api("get", "chargeback"),
        {"dev_a": 403, "nobody": 403},
        ("finance", "lead_a", "admin"),
    ),
    Case("read usage", _api("get", "usage"), {"nobody": 403}, ("finance", "dev_a")),
    Case(
        "add a node pool (platform admins only)",
        _api(
            "post",
            "pool-list",
            body={"name": "Mine", "slug": "mine", "tier": "dev", "sharing_mode": "exclusive"},
        ),
        {"dev_a": 403, "lead_a": 403, "finance": 403, "nobody": 403},
        ("admin",),
    ),
    Case(
        "add a price (platform admins only)",
        _api(
            "post",
            "price-list",
            body=lambda org, fleet: {"flavor": fleet.a100.pk, "price_per_hour": "1"},
        ),
        {"dev_a": 403, "lead_a": 403, "finance": 403, "nobody": 403},
        ("admin",),
    ),
    Case("audit page", _page("audit-page"), {"dev_a": 404, "finance": 404}, ("lead_a",)),
    Case("approvals page", _page("approvals-page"), {"dev_a": 404}, ("lead_a",)),
    Case("fleet page", _page("fleet-page"), {"dev_a": 404, "lead_a": 404}, ("admin",)),
]


@pytest.fixture
def ids(org: Org, fleet: Fleet) -> dict[str, Any]:
    response = api_client(org.dev_a).post(
        reverse("gpu-request-list"), request_body(org.project_a, fleet.a100), format="json"
    )
    quota = Quota.objects.filter(team=org.team_a, project=None).order_by("pk").first()
    assert quota is not None
    return {"request": response.json()["id"], "quota": quota.pk}


@pytest.mark.parametrize("case", CASES, ids=[case.what for case in CASES])
def test_wrong_role_is_refused(case: Case, org: Org, fleet: Fleet, ids: dict[str, Any]) -> None:
    before = GpuRequest.objects.get(pk=ids["request"]).status
    for persona, expected in case.refused.items():
        response = case.call(getattr(org, persona), org, fleet, ids)
        assert response.status_code == expected, (case.what, persona, response.status_code)
    assert GpuRequest.objects.get(pk=ids["request"]).status == before
    for persona in case.allowed:
        response = case.call(getattr(org, persona), org, fleet, ids)
        assert response.status_code < 300, (case.what, persona, response.status_code)


def test_the_admin_site_refuses_everyone_who_is_not_staff(org: Org) -> None:
    """Prices are written through the API by platform admins; the admin site lets staff read.
    To anyone else signed in it does not exist: the portal's 404, as every page a role has no
    use for."""
    for persona in ("dev_a", "lead_a", "finance"):
        client = Client()
        client.force_login(getattr(org, persona))
        response = client.post("/admin/accounting/price/add/", {})
        assert response.status_code == 404 and "Back to the portal" in response.content.decode()
