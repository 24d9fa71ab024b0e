from __future__ import annotations

import pytest
from django.urls import reverse

from tests.scheduling.conftest import Fleet
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db

# Who reads and writes pools and flavors: their contracts in tests/governance/test_api_admin_writes.


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


def test_invalid_filter_value_is_400(org: Org, fleet: Fleet) -> None:
    response = api_client(org.dev_a).get(reverse("flavor-list"), {"kind": "quantum"})
    assert response.status_code == 400
    assert "kind" in response.json()["error"]["fields"]
