from __future__ import annotations

import pytest
from django.urls import reverse

from scheduling.models import Quota
from tests.scheduling.conftest import Fleet
from tests.scheduling.helpers import request_body
from tests.support.api_contract import ApiContract, World
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db


def a_project_split_of_team_a(world: World) -> dict[str, int]:
    """Of another flavor than `team_quota`, which the contract's admin has deleted by then."""
    org, flavor = world.org, world.fleet.l4_6g
    return {"team": org.team_a.pk, "project": org.project_a.pk, "flavor": flavor.pk}


QUOTAS = ApiContract(
    basename="quota",
    subject=lambda world: team_quota(world.org, world.fleet),
    audit="quota",
    may_read={"admin", "lead_a", "dev_a"},
    may_create={"admin", "lead_a"},
    may_update={"admin"},
    may_delete={"admin"},
    create_body=lambda world: {**a_project_split_of_team_a(world), "guaranteed": 1, "limit": 2},
    update_body={"limit": 20},
    list_filters=lambda world: [{"team": world.org.team_a.pk}],
)
test_quotas_api_contract = QUOTAS.tests()


def team_quota(org: Org, fleet: Fleet) -> Quota:
    return Quota.objects.get(team=org.team_a, project=None, flavor=fleet.a100)


def test_quota_list_shows_used_units(org: Org, fleet: Fleet) -> None:
    api_client(org.dev_a).post(
        reverse("gpu-request-list"),
        request_body(org.project_a, fleet.l4_12g, gpu_count=3),
        format="json",
    )
    response = api_client(org.lead_a).get(
        reverse("quota-list"), {"flavor": fleet.l4_12g.pk, "team_level": True}
    )
    (row,) = response.json()["results"]
    # Asked for and not started: queued, not used (the quota page counts it so too).
    assert (row["guaranteed"], row["limit"], row["used"], row["queued"]) == (8, 16, 0, 3)
    assert row["unit"] == "vGPU shares"


def test_lead_splits_team_quota_over_projects(org: Org, fleet: Fleet) -> None:
    client = api_client(org.lead_a)
    body = {"team": org.team_a.pk, "flavor": fleet.a100.pk, "guaranteed": 3, "limit": 6}
    response = client.post(reverse("quota-list"), {**body, "project": org.project_a.pk})
    assert response.status_code == 201, response.content
    # 3 + 2 > the team's guaranteed 4.
    response = client.post(
        reverse("quota-list"), {**body, "project": org.project_a2.pk, "guaranteed": 2}
    )
    assert response.status_code == 400
    assert "guaranteed" in response.json()["error"]["fields"]
    # A project limit above the team's limit of 16.
    response = client.post(
        reverse("quota-list"),
        {**body, "project": org.project_a2.pk, "guaranteed": 1, "limit": 17},
    )
    assert response.status_code == 400
    assert "limit" in response.json()["error"]["fields"]


def test_project_quota_then_bounds_its_requests(org: Org, fleet: Fleet) -> None:
    api_client(org.lead_a).post(
        reverse("quota-list"),
        {
            "team": org.team_a.pk,
            "project": org.project_a.pk,
            "flavor": fleet.l4_6g.pk,
            "guaranteed": 1,
            "limit": 2,
        },
    )
    response = api_client(org.dev_a).post(
        reverse("gpu-request-list"),
        request_body(org.project_a, fleet.l4_6g, gpu_count=3),
        format="json",
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "quota_exceeded"


def test_guaranteed_above_limit_is_400(org: Org, fleet: Fleet) -> None:
    url = reverse("quota-detail", kwargs={"pk": team_quota(org, fleet).pk})
    response = api_client(org.admin).patch(url, {"guaranteed": 17}, format="json")  # limit 16
    assert response.status_code == 400
    assert "guaranteed" in response.json()["error"]["fields"]
