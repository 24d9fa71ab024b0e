from __future__ import annotations

import pytest
from django.urls import reverse

from scheduling.models import Quota
from tests.scheduling.conftest import Fleet
from tests.scheduling.helpers import request_body
from tests.support.cross_tenant import assert_other_tenant_hidden, covers, result_ids
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db


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
    assert (row["guaranteed"], row["limit"], row["used"]) == (8, 16, 3)


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
    # A project limit above the team's limit of 8.
    response = client.post(
        reverse("quota-list"),
        {**body, "project": org.project_a2.pk, "guaranteed": 1, "limit": 9},
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


def test_only_admins_set_team_quotas(org: Org, fleet: Fleet) -> None:
    url = reverse("quota-detail", kwargs={"pk": team_quota(org, fleet).pk})
    assert api_client(org.lead_a).patch(url, {"limit": 20}, format="json").status_code == 403
    response = api_client(org.admin).patch(url, {"limit": 20}, format="json")
    assert response.status_code == 200
    assert team_quota(org, fleet).limit == 20


def test_developer_cannot_change_quotas(org: Org, fleet: Fleet) -> None:
    response = api_client(org.dev_a).post(
        reverse("quota-list"),
        {
            "team": org.team_a.pk,
            "project": org.project_a.pk,
            "flavor": fleet.a100.pk,
            "guaranteed": 1,
            "limit": 1,
        },
    )
    assert response.status_code == 403


def test_guaranteed_above_limit_is_400(org: Org, fleet: Fleet) -> None:
    url = reverse("quota-detail", kwargs={"pk": team_quota(org, fleet).pk})
    response = api_client(org.admin).patch(url, {"guaranteed": 9}, format="json")
    assert response.status_code == 400
    assert "guaranteed" in response.json()["error"]["fields"]


@covers("quota-detail")
def test_other_team_quotas_are_404(org: Org, fleet: Fleet) -> None:
    other = Quota.objects.filter(team=org.team_b).first()
    assert other is not None
    assert_other_tenant_hidden(
        api_client(org.lead_a),
        detail_route="quota-detail",
        pk=other.pk,
        list_route="quota-list",
        write_payload={"limit": 99},
        list_filters=[{"team": org.team_b.pk}],
    )
    other.refresh_from_db()
    assert other.limit != 99
    assert result_ids(api_client(org.finance).get(reverse("quota-list"))) == set()


def test_anonymous_cannot_list_quotas(org: Org, fleet: Fleet) -> None:
    assert api_client(None).get(reverse("quota-list")).status_code == 401
