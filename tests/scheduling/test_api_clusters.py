"""/api/v1/clusters/: the registry is catalogue (every role reads the same list, only platform
admins write), and the kubeconfig goes in but never comes out."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse
from drf_spectacular.generators import SchemaGenerator

from scheduling.models import LOCAL_CLUSTER_SLUG, Cluster, NodePool, local_cluster_id
from tenants.models import AuditEvent
from tests.scheduling.conftest import Fleet
from tests.support.api_contract import ApiContract
from tests.support.clusters import TOKEN, kubeconfig_text, make_cluster
from tests.support.cross_tenant import result_ids
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db

READERS = {"admin", "finance", "lead_a", "dev_a", "lead_b", "dev_b"}

CLUSTERS = ApiContract(
    basename="cluster",
    subject=lambda world: make_cluster(world.org.admin, slug="east"),
    may_read=READERS,
    may_create={"admin"},
    may_update={"admin"},
    may_delete={"admin"},
    create_body=lambda world: {
        "name": "West",
        "slug": "west",
        "scheduler": "kueue",
        "kubeconfig": kubeconfig_text("https://gpu-west.example:6443"),
    },
    update_body={"is_active": False},
    audit="cluster",
)
test_cluster_api_contract = CLUSTERS.tests()

LIST = reverse("cluster-list")


def _detail(cluster: Cluster) -> str:
    return reverse("cluster-detail", kwargs={"pk": cluster.pk})


def _assert_no_kubeconfig(response: Any) -> None:
    text = response.content.decode()
    assert TOKEN not in text
    assert "kubeconfig" not in text
    assert "certificate-authority" not in text


def test_the_kubeconfig_is_in_no_response(org: Org) -> None:
    admin = api_client(org.admin)
    created = admin.post(
        LIST,
        {"name": "East", "slug": "east", "kubeconfig": kubeconfig_text()},
        format="json",
    )
    assert created.status_code == 201, created.content
    cluster = Cluster.objects.get(slug="east")
    assert TOKEN not in cluster.kubeconfig_sealed
    new_config = {"kubeconfig": kubeconfig_text("https://10.1.2.3:6443")}
    responses = [
        created,
        admin.get(LIST),
        admin.get(_detail(cluster)),
        admin.patch(_detail(cluster), new_config, format="json"),
        api_client(org.dev_a).get(_detail(cluster)),
    ]
    for response in responses:
        assert response.status_code in (200, 201)
        _assert_no_kubeconfig(response)
    body = responses[3].json()
    assert body["api_server"] == "https://10.1.2.3:6443"
    assert body["is_local"] is False


def test_a_cluster_reads_its_scheduler_health_and_pools(org: Org, fleet: Fleet) -> None:
    cluster = make_cluster(org.admin, scheduler="kueue")
    NodePool.objects.filter(pk=fleet.a100.pool_id).update(cluster=cluster)
    body = api_client(org.dev_b).get(_detail(cluster)).json()
    assert body["scheduler"] == "kueue"
    assert body["pools"] == [fleet.a100.pool.slug]
    assert body["health"] == {
        "reachable": True,
        "last_contact_at": None,
        "last_error": "",
        "last_error_at": None,
        "activity_signal_at": None,
        "activity_gap_since": None,
        "activity_gap_reason": "",
    }


def test_the_local_cluster_shows_the_deployments_scheduler(org: Org, settings: Any) -> None:
    settings.SCHEDULER = "kueue"
    local = Cluster.objects.get(pk=local_cluster_id())
    body = api_client(org.lead_a).get(_detail(local)).json()
    assert (body["slug"], body["scheduler"], body["is_local"]) == (
        LOCAL_CLUSTER_SLUG,
        "kueue",
        True,
    )


@pytest.mark.parametrize(
    ("kubeconfig", "message"),
    [
        ("clusters: [", "not valid YAML"),
        (kubeconfig_text().replace("current-context: east\n", ""), "no current-context"),
        (kubeconfig_text(server="ftp://x"), "no http(s) server URL"),
    ],
)
def test_a_bad_kubeconfig_is_a_400_with_its_reason(org: Org, kubeconfig: str, message: str) -> None:
    response = api_client(org.admin).post(
        LIST, {"name": "Bad", "slug": "bad", "kubeconfig": kubeconfig}, format="json"
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert message in error["fields"]["kubeconfig"]
    assert not Cluster.objects.filter(slug="bad").exists()


def test_registering_without_a_kubeconfig_is_a_400(org: Org) -> None:
    response = api_client(org.admin).post(LIST, {"name": "Bare", "slug": "bare"}, format="json")
    assert response.status_code == 400
    assert "kubeconfig" in response.json()["error"]["fields"]


def test_the_local_cluster_takes_no_kubeconfig_and_is_not_deleted(org: Org) -> None:
    local = Cluster.objects.get(pk=local_cluster_id())
    admin = api_client(org.admin)
    patched = admin.patch(_detail(local), {"kubeconfig": kubeconfig_text()}, format="json")
    assert patched.status_code == 400
    assert "own credentials" in patched.json()["error"]["fields"]["kubeconfig"]
    deleted = admin.delete(_detail(local))
    assert deleted.status_code == 409
    assert deleted.json()["error"]["code"] == "cluster_is_local"
    local.refresh_from_db()
    assert local.is_local


def test_a_cluster_with_pools_is_a_409_not_a_500(org: Org, fleet: Fleet) -> None:
    cluster = make_cluster(org.admin)
    NodePool.objects.filter(pk=fleet.a100.pool_id).update(cluster=cluster)
    response = api_client(org.admin).delete(_detail(cluster))
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "cluster_in_use"
    assert "move or delete them first" in response.json()["error"]["message"]


@pytest.mark.parametrize("persona", ["lead_a", "dev_a", "lead_b", "finance"])
def test_only_admins_write_clusters(org: Org, persona: str) -> None:
    cluster = make_cluster(org.admin)
    client = api_client(getattr(org, persona))
    body = {"name": "X", "slug": "x", "kubeconfig": kubeconfig_text()}
    assert client.post(LIST, body, format="json").status_code == 403
    assert client.patch(_detail(cluster), {"is_active": False}, format="json").status_code == 403
    assert client.delete(_detail(cluster)).status_code == 403
    cluster.refresh_from_db()
    assert cluster.is_active
    assert not Cluster.objects.filter(slug="x").exists()


def test_both_teams_see_the_same_clusters(org: Org) -> None:
    make_cluster(org.admin, slug="east")
    make_cluster(org.admin, slug="west")
    local_cluster_id()
    seen = [result_ids(api_client(getattr(org, p)).get(LIST)) for p in ("lead_a", "dev_b")]
    assert seen[0] == seen[1] == set(Cluster.objects.values_list("pk", flat=True))
    assert len(seen[0]) == 3
    assert api_client(org.nobody).get(LIST).json()["results"] == []


def test_the_schema_has_the_kubeconfig_only_in_requests() -> None:
    components = SchemaGenerator().get_schema(request=None, public=True)["components"]["schemas"]
    assert "kubeconfig" not in components["Cluster"]["properties"]
    assert components["ClusterRequest"]["properties"]["kubeconfig"]["writeOnly"] is True
    assert set(components["Cluster"]["properties"]["health"]["allOf"][0]) == {"$ref"}


def test_an_admin_sets_a_clusters_prometheus_url(org: Org) -> None:
    cluster = make_cluster(org.admin)
    url = "http://prometheus-operated.monitoring.svc:9090/"
    response = api_client(org.admin).patch(_detail(cluster), {"prometheus_url": url}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["prometheus_url"] == url
    cluster.refresh_from_db()
    assert cluster.prometheus_url == url
    event = AuditEvent.objects.filter(action="cluster.updated").latest("pk")
    assert event.data["changes"]["prometheus_url"] == ["", url]
    created = api_client(org.admin).post(
        LIST,
        {
            "name": "West",
            "slug": "west",
            "kubeconfig": kubeconfig_text(),
            "prometheus_url": "https://prom.west.example/prometheus",
        },
        format="json",
    )
    assert created.status_code == 201, created.content
    assert Cluster.objects.get(slug="west").prometheus_url == "https://prom.west.example/prometheus"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("prometheus:9090", "http:// or https://"),
        ("ftp://prometheus:9090", "http:// or https://"),
        ("http://admin:s3cret@prometheus:9090", "no credentials"),
        ("http://prometheus:9090/api/v1/query?query=up", "without a query"),
        ("http://prometheus:99999", "Not a URL"),
    ],
)
def test_a_bad_prometheus_url_is_a_400_naming_the_field(org: Org, url: str, message: str) -> None:
    cluster = make_cluster(org.admin)
    response = api_client(org.admin).patch(_detail(cluster), {"prometheus_url": url}, format="json")
    assert response.status_code == 400, response.content
    assert message in response.json()["error"]["fields"]["prometheus_url"]
    cluster.refresh_from_db()
    assert cluster.prometheus_url == ""


def test_a_developer_may_not_set_a_prometheus_url(org: Org) -> None:
    cluster = make_cluster(org.admin)
    body = {"prometheus_url": "http://evil.example:9090"}
    response = api_client(org.dev_a).patch(_detail(cluster), body, format="json")
    assert response.status_code == 403
    cluster.refresh_from_db()
    assert cluster.prometheus_url == ""
