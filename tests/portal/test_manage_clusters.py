"""The fleet settings page for clusters: register with a kubeconfig, replace it, deactivate,
delete; the kubeconfig never comes back on a page, and only platform admins manage clusters."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from scheduling.models import LOCAL_CLUSTER_SLUG, Cluster, NodePool, local_cluster_id
from scheduling.sealing import unseal
from tests.scheduling.conftest import Fleet
from tests.support.clusters import TOKEN, kubeconfig_text, make_cluster
from tests.support.cross_tenant import covers
from tests.support.personas import Org

pytestmark = pytest.mark.django_db


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _form(**overrides: Any) -> dict[str, Any]:
    return {
        "name": "East",
        "slug": "east",
        "scheduler": "kueue",
        "is_active": "on",
        "kubeconfig": kubeconfig_text(),
        **overrides,
    }


def test_admin_registers_a_cluster_and_the_page_never_shows_its_kubeconfig(org: Org) -> None:
    admin = _client(org.admin)
    response = admin.post(reverse("manage-clusters"), _form())
    assert response.status_code == 302, response.content.decode()[-1500:]
    cluster = Cluster.objects.get(slug="east")
    assert unseal(cluster.kubeconfig_sealed)["kubeconfig"] == kubeconfig_text()
    for url in (
        reverse("manage-clusters"),
        reverse("manage-clusters-edit", kwargs={"pk": cluster.pk}),
        reverse("manage-clusters-delete", kwargs={"pk": cluster.pk}),
    ):
        page = admin.get(url).content.decode()
        assert TOKEN not in page and cluster.kubeconfig_sealed not in page
    listed = admin.get(reverse("manage-clusters")).content.decode()
    assert "https://gpu-east.example:6443" in listed and "kueue" in listed


def test_a_refused_form_does_not_echo_the_typed_kubeconfig(org: Org) -> None:
    make_cluster(org.admin)
    response = _client(org.admin).post(reverse("manage-clusters"), _form(name="East again"))
    assert response.status_code == 400
    page = response.content.decode()
    assert TOKEN not in page and 'value="East again"' in page


def test_a_bad_kubeconfig_is_shown_on_its_field(org: Org) -> None:
    response = _client(org.admin).post(reverse("manage-clusters"), _form(kubeconfig="a: ["))
    assert response.status_code == 400
    page = response.content.decode()
    assert 'data-testid="error-kubeconfig"' in page and "not valid YAML" in page
    assert not Cluster.objects.filter(slug="east").exists()


def test_admin_replaces_the_kubeconfig_and_deactivates_the_cluster(org: Org) -> None:
    cluster = make_cluster(org.admin)
    admin = _client(org.admin)
    url = reverse("manage-clusters-edit", kwargs={"pk": cluster.pk})
    assert "Replace the kubeconfig" in admin.get(url).content.decode()
    keep = admin.post(url, _form(kubeconfig="", is_active=""))
    assert keep.status_code == 302, keep.content.decode()[-1500:]
    cluster.refresh_from_db()
    assert not cluster.is_active
    assert unseal(cluster.kubeconfig_sealed)["kubeconfig"] == kubeconfig_text()
    new_text = kubeconfig_text("https://10.9.8.7:6443", token="rotated")
    assert admin.post(url, _form(kubeconfig=new_text)).status_code == 302
    cluster.refresh_from_db()
    assert cluster.is_active and cluster.api_server == "https://10.9.8.7:6443"
    assert unseal(cluster.kubeconfig_sealed)["kubeconfig"] == new_text


def test_the_local_cluster_form_has_no_kubeconfig_and_it_is_not_deleted(org: Org) -> None:
    local = Cluster.objects.get(pk=local_cluster_id())
    admin = _client(org.admin)
    edit = reverse("manage-clusters-edit", kwargs={"pk": local.pk})
    page = admin.get(edit).content.decode()
    assert 'name="kubeconfig"' not in page and "SCHEDULER setting" in page
    renamed = admin.post(edit, {"name": "Main", "is_active": "on", "kubeconfig": "x: y"})
    assert renamed.status_code == 302
    local.refresh_from_db()
    assert (local.name, local.slug, local.is_local) == ("Main", LOCAL_CLUSTER_SLUG, True)
    refused = admin.post(reverse("manage-clusters-delete", kwargs={"pk": local.pk}))
    assert refused.status_code == 409
    assert "The local cluster is this deployment" in refused.content.decode()


def test_admin_sets_the_local_clusters_prometheus_and_a_bad_address_is_a_form_error(
    org: Org,
) -> None:
    local = Cluster.objects.get(pk=local_cluster_id())
    admin = _client(org.admin)
    edit = reverse("manage-clusters-edit", kwargs={"pk": local.pk})
    bad = admin.post(
        edit, {"name": local.name, "is_active": "on", "prometheus_url": "http://u:p@prom:9090"}
    )
    assert bad.status_code == 400
    page = bad.content.decode()
    assert 'data-testid="error-prometheus_url"' in page and "no credentials" in page
    url = "http://prometheus-operated.monitoring.svc:9090"
    good = admin.post(edit, {"name": local.name, "is_active": "on", "prometheus_url": url})
    assert good.status_code == 302, good.content.decode()[-1500:]
    local.refresh_from_db()
    assert local.prometheus_url == url
    assert url in admin.get(reverse("manage-clusters")).content.decode()


def test_a_cluster_with_pools_is_not_deleted_but_an_empty_one_is(org: Org, fleet: Fleet) -> None:
    east, west = make_cluster(org.admin), make_cluster(org.admin, slug="west")
    NodePool.objects.filter(pk=fleet.a100.pool_id).update(cluster=east)
    admin = _client(org.admin)
    refused = admin.post(reverse("manage-clusters-delete", kwargs={"pk": east.pk}))
    assert refused.status_code == 409
    assert "still holds pools" in refused.content.decode()
    assert admin.post(reverse("manage-clusters-delete", kwargs={"pk": west.pk})).status_code == 302
    assert list(Cluster.objects.filter(slug__in=["east", "west"])) == [east]


@covers("manage-clusters-edit", "manage-clusters-delete")
def test_only_platform_admins_manage_clusters(org: Org) -> None:
    cluster = make_cluster(org.admin)
    for user, status in (
        (org.lead_a, 404),
        (org.dev_b, 404),
        (org.finance, 404),
        (org.nobody, 404),
    ):
        client = _client(user)
        for route in ("manage-clusters-edit", "manage-clusters-delete"):
            url = reverse(route, kwargs={"pk": cluster.pk})
            assert client.get(url).status_code == status, (user, route)
            assert client.post(url, _form(name="Taken")).status_code == status
        assert client.post(reverse("manage-clusters"), _form(slug="x")).status_code == 404
    cluster.refresh_from_db()
    assert cluster.name == "East"
    assert Cluster.objects.filter(slug__in=["east", "x"]).count() == 1
