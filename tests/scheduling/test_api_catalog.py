from __future__ import annotations

import pytest
from django.urls import reverse

from scheduling.models import Flavor, NodePool
from tests.scheduling.conftest import Fleet
from tests.support.cross_tenant import covers, result_ids
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db


def test_pools_list_all_three_sharing_modes_with_capacity(org: Org, fleet: Fleet) -> None:
    response = api_client(org.dev_a).get(reverse("pool-list"))
    assert response.status_code == 200
    pools = {row["slug"]: row for row in response.json()["results"]}
    assert {pool["sharing_mode"] for pool in pools.values()} == {"exclusive", "mig", "vgpu"}
    assert pools["a100-training"]["gpu_count"] == 16
    assert pools["l4-vgpu"]["scheduler_name"] == "hami-scheduler"


def test_flavors_carry_resource_names_and_gpu_equivalents(org: Org, fleet: Fleet) -> None:
    response = api_client(org.dev_b).get(reverse("flavor-list"), {"kind": "mig"})
    rows = {row["slug"]: row for row in response.json()["results"]}
    assert set(rows) == {"h100-1g10gb", "h100-3g40gb"}
    assert rows["h100-1g10gb"]["resource_names"] == ["nvidia.com/mig-1g.10gb"]
    assert rows["h100-3g40gb"]["gpu_equivalent"] == "0.4286"


@covers("pool-detail", "flavor-detail")
def test_catalog_is_shared_but_hidden_from_users_without_a_role(org: Org, fleet: Fleet) -> None:
    """Pools and flavors belong to the organisation, not a team; a stranger sees none."""
    pool = NodePool.objects.get(slug="a100-training")
    flavor = Flavor.objects.get(slug="a100-80g")
    stranger = api_client(org.nobody)
    assert stranger.get(reverse("pool-detail", kwargs={"pk": pool.pk})).status_code == 404
    assert stranger.get(reverse("flavor-detail", kwargs={"pk": flavor.pk})).status_code == 404
    assert result_ids(stranger.get(reverse("flavor-list"))) == set()
    member = api_client(org.dev_b)
    assert member.get(reverse("pool-detail", kwargs={"pk": pool.pk})).status_code == 200
    # Members read the catalogue; only platform admins change it (tests/governance).
    url = reverse("flavor-detail", kwargs={"pk": flavor.pk})
    assert member.patch(url, {"name": "x"}, format="json").status_code == 403


def test_invalid_filter_value_is_400(org: Org, fleet: Fleet) -> None:
    response = api_client(org.dev_a).get(reverse("flavor-list"), {"kind": "quantum"})
    assert response.status_code == 400
    assert "kind" in response.json()["error"]["fields"]


def test_anonymous_cannot_read_catalog(org: Org, fleet: Fleet) -> None:
    assert api_client(None).get(reverse("pool-list")).status_code == 401
