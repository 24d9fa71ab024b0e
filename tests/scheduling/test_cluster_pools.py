"""Pools belong to a cluster (the local one unless named) and flavors may hold the same cards
in other pools: through the API, the fleet settings pages and the read-only admin."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from scheduling.models import LOCAL_CLUSTER_SLUG, Cluster, Flavor, NodePool
from tests.scheduling.conftest import Fleet
from tests.support.clusters import TOKEN, make_cluster
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db


def _pool_body(**overrides: Any) -> dict[str, Any]:
    return {
        "name": "A100 east",
        "slug": "a100-east",
        "tier": "training",
        "sharing_mode": "exclusive",
        **overrides,
    }


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_pool_is_made_in_a_named_cluster_or_the_local_one(org: Org, fleet: Fleet) -> None:
    make_cluster(org.admin)
    admin = api_client(org.admin)
    east = admin.post(reverse("pool-list"), _pool_body(cluster="east"), format="json")
    assert east.status_code == 201, east.content
    assert east.json()["cluster"] == "east"
    local = admin.post(reverse("pool-list"), _pool_body(name="B", slug="b"), format="json")
    assert local.json()["cluster"] == LOCAL_CLUSTER_SLUG
    unknown = admin.post(reverse("pool-list"), _pool_body(cluster="nowhere"), format="json")
    assert unknown.status_code == 400
    assert "cluster" in unknown.json()["error"]["fields"]


def test_a_pool_moves_to_another_cluster_and_lists_by_it(org: Org, fleet: Fleet) -> None:
    make_cluster(org.admin)
    admin = api_client(org.admin)
    pool = fleet.a100.pool
    url = reverse("pool-detail", kwargs={"pk": pool.pk})
    assert admin.patch(url, {"cluster": "east"}, format="json").json()["cluster"] == "east"
    listed = api_client(org.dev_a).get(reverse("pool-list"), {"cluster__slug": "east"}).json()
    assert [row["slug"] for row in listed["results"]] == [pool.slug]


def test_a_flavor_names_its_other_pools_of_the_same_sharing_mode(org: Org, fleet: Fleet) -> None:
    east = make_cluster(org.admin)
    same = NodePool.objects.create(
        name="A100 east", slug="a100-east", tier=fleet.a100.pool.tier, cluster=east,
        sharing_mode=fleet.a100.pool.sharing_mode,
    )  # fmt: skip
    admin = api_client(org.admin)
    url = reverse("flavor-detail", kwargs={"pk": fleet.a100.pk})
    response = admin.patch(url, {"other_pools": [same.slug]}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["other_pools"] == [same.slug]
    assert list(fleet.a100.other_pools.all()) == [same]
    own = admin.patch(url, {"other_pools": [fleet.a100.pool.slug]}, format="json")
    assert own.status_code == 400
    assert "own pool" in own.json()["error"]["fields"]["other_pools"]
    other_mode = admin.patch(url, {"other_pools": [fleet.mig_1g.pool.slug]}, format="json")
    assert other_mode.status_code == 400
    assert "shares its cards otherwise" in other_mode.json()["error"]["fields"]["other_pools"]
    assert list(fleet.a100.other_pools.all()) == [same]


def test_a_new_flavor_may_name_other_pools(org: Org, fleet: Fleet) -> None:
    response = api_client(org.admin).post(
        reverse("flavor-list"),
        {
            "name": "L4 3G",
            "slug": "l4-3g",
            "pool": fleet.l4_6g.pool.slug,
            "other_pools": [],
            "kind": "vgpu",
            "gpu_model": "L4",
            "gpu_memory_mib": 3072,
            "gpu_cores_percent": 25,
            "gpu_equivalent": "0.25",
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    assert response.json()["other_pools"] == []


def test_the_pool_page_form_takes_a_cluster_and_defaults_to_the_local_one(
    org: Org, fleet: Fleet
) -> None:
    east = make_cluster(org.admin)
    admin = _client(org.admin)
    tier = fleet.a100.pool.tier
    form = {
        "name": "Blackwell",
        "slug": "blackwell",
        "tier": tier.pk,
        "sharing_mode": "exclusive",
        "placement": "portal",
        "scoring": "binpack",
        "allocation": "device-plugin",
        "scheduler_name": "default-scheduler",
        "node_selector": "{}",
        "taints": "[]",
        "allowed_kinds": "[]",
        "short_reserve_fraction": "0",
        "short_max_runtime_seconds": "3600",
    }
    page = admin.get(reverse("manage-pools"))
    assert 'name="cluster"' in page.content.decode()
    assert admin.post(reverse("manage-pools"), {**form, "cluster": east.pk}).status_code == 302
    assert NodePool.objects.get(slug="blackwell").cluster == east
    second = {**form, "name": "Blackwell 2", "slug": "blackwell-2"}
    assert admin.post(reverse("manage-pools"), second).status_code == 302
    assert NodePool.objects.get(slug="blackwell-2").cluster.slug == LOCAL_CLUSTER_SLUG
    listed = admin.get(reverse("manage-pools")).content.decode()
    assert "East" in listed


def test_the_flavor_page_form_takes_other_pools(org: Org, fleet: Fleet) -> None:
    east = make_cluster(org.admin)
    same = NodePool.objects.create(
        name="A100 east", slug="a100-east", tier=fleet.a100.pool.tier, cluster=east,
        sharing_mode=fleet.a100.pool.sharing_mode,
    )  # fmt: skip
    admin = _client(org.admin)
    flavor = fleet.a100
    url = reverse("manage-flavors-edit", kwargs={"pk": flavor.pk})
    page = admin.get(url).content.decode()
    assert 'name="other_pools"' in page
    form = {
        "name": flavor.name,
        "slug": flavor.slug,
        "pool": flavor.pool_id,
        "other_pools": [same.pk],
        "kind": flavor.kind,
        "gpu_model": flavor.gpu_model,
        "gpu_memory_mib": flavor.gpu_memory_mib,
        "gpu_cores_percent": flavor.gpu_cores_percent,
        "mig_profile": flavor.mig_profile,
        "gpu_equivalent": flavor.gpu_equivalent,
        "is_active": "on",
    }
    response = admin.post(url, form)
    assert response.status_code == 302, response.content.decode()[-1500:]
    assert list(Flavor.objects.get(pk=flavor.pk).other_pools.all()) == [same]
    assert "A100 east" in admin.get(reverse("manage-flavors")).content.decode()


def test_the_admin_shows_a_cluster_without_its_kubeconfig(org: Org) -> None:
    org.admin.is_staff = org.admin.is_superuser = True
    org.admin.save()
    cluster = make_cluster(org.admin)
    admin = _client(org.admin)
    page = admin.get(reverse("admin:scheduling_cluster_change", args=[cluster.pk]))
    assert page.status_code == 200
    text = page.content.decode()
    assert "gpu-east.example" in text
    assert TOKEN not in text
    assert Cluster.objects.get(pk=cluster.pk).kubeconfig_sealed not in text
    assert "kubeconfig_sealed" not in text
