"""A request may name a cluster: one that is active and holds one of its flavor's pools. The
API and the form take it by slug, the request page and `gpuctl get` show it."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from scheduling.models import Cluster, GpuRequest, NodePool
from tests.scheduling.conftest import Fleet
from tests.scheduling.helpers import request_body
from tests.support.clusters import make_cluster
from tests.support.factories import GpuRequestFactory, api_submit
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db


def _east_with_a100s(org: Org, fleet: Fleet) -> Cluster:
    """A registered cluster holding another pool of the A100 flavor's cards."""
    east = make_cluster(org.admin)
    pool = NodePool.objects.create(
        name="A100 east", slug="a100-east", tier=fleet.a100.pool.tier, cluster=east,
        sharing_mode=fleet.a100.pool.sharing_mode,
    )  # fmt: skip
    fleet.a100.other_pools.add(pool)
    return east


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_request_names_a_cluster_holding_one_of_its_flavors_pools(org: Org, fleet: Fleet) -> None:
    _east_with_a100s(org, fleet)
    body = api_submit(org.dev_a, request_body(org.project_a, fleet.a100, cluster="east")).json()
    assert body["cluster"] == "east"
    assert GpuRequest.objects.get(pk=body["id"]).cluster.slug == "east"  # type: ignore[union-attr]
    listed = api_client(org.dev_a).get(reverse("gpu-request-list")).json()["results"]
    assert [row["cluster"] for row in listed] == ["east"]


def test_a_request_without_a_cluster_lets_the_engine_choose(org: Org, fleet: Fleet) -> None:
    body = api_submit(org.dev_a, request_body(org.project_a, fleet.l4_6g)).json()
    assert body["cluster"] is None


@pytest.mark.parametrize("cluster", ["nowhere", "east\x00", "\u00a7 east"])
def test_an_unknown_cluster_is_a_400(org: Org, fleet: Fleet, cluster: str) -> None:
    _east_with_a100s(org, fleet)
    response = api_submit(
        org.dev_a, request_body(org.project_a, fleet.a100, cluster=cluster), status=400
    )
    assert "does not exist" in response.json()["error"]["fields"]["cluster"]


def test_the_form_refuses_a_cluster_that_is_not_a_choice(org: Org, fleet: Fleet) -> None:
    client = _client(org.dev_a)
    for value in ("east\x00", "east", "999999"):
        response = client.post(reverse("gpu-request-new"), {"cluster": value})
        assert response.status_code == 200
        assert 'data-testid="error-cluster"' in response.content.decode()
    assert not GpuRequest.objects.exists()


def test_a_cluster_without_the_flavors_pools_or_inactive_is_a_400(org: Org, fleet: Fleet) -> None:
    east = _east_with_a100s(org, fleet)
    wrong = api_submit(
        org.dev_a, request_body(org.project_a, fleet.l4_6g, cluster="east"), status=400
    )
    assert "has no pool of" in wrong.json()["error"]["fields"]["cluster"]
    Cluster.objects.filter(pk=east.pk).update(is_active=False)
    inactive = api_submit(
        org.dev_a, request_body(org.project_a, fleet.a100, cluster="east"), status=400
    )
    assert "inactive" in inactive.json()["error"]["fields"]["cluster"]
    assert not GpuRequest.objects.exists()


def test_the_form_takes_a_cluster_and_shows_its_refusal_on_the_field(
    org: Org, fleet: Fleet
) -> None:
    _east_with_a100s(org, fleet)
    client = _client(org.dev_a)
    form = {
        "name": "notebook",
        "project": org.project_a.pk,
        "flavor": fleet.l4_12g.pk,
        "gpu_count": 1,
        "kind": "notebook",
        "image": "jupyter/base-notebook:2024.1",
        "max_runtime_hours": "2",
        "priority": "normal",
        "allow_shared_node": "on",
    }
    page = client.get(reverse("gpu-request-new")).content.decode()
    east = Cluster.objects.get(slug="east")
    assert 'name="cluster"' in page and f'value="{east.pk}">East<' in page
    refused = client.post(reverse("gpu-request-new"), {**form, "cluster": east.pk})
    assert refused.status_code == 200
    assert "has no pool of" in refused.content.decode()
    assert not GpuRequest.objects.exists()
    a100 = {**form, "flavor": fleet.a100.pk, "kind": "job", "cluster": east.pk}
    done = client.post(reverse("gpu-request-new"), a100)
    assert done.status_code == 302, done.content.decode()[-1500:]
    created = GpuRequest.objects.get()
    assert created.cluster is not None and created.cluster.slug == "east"
    shown = client.get(reverse("gpu-request-page", kwargs={"pk": created.pk})).content.decode()
    assert "East (asked for)" in shown


def test_the_request_page_shows_where_a_request_without_a_cluster_runs(
    org: Org, fleet: Fleet
) -> None:
    running = GpuRequestFactory.create(
        project=org.project_a, flavor=fleet.l4_6g, actor=org.dev_a, to="running"
    )
    page = _client(org.dev_a).get(reverse("gpu-request-page", kwargs={"pk": running.pk}))
    text = page.content.decode()
    assert 'data-testid="request-cluster">Local cluster<' in text
    waiting = GpuRequestFactory.create(project=org.project_a, flavor=fleet.a100, actor=org.dev_a)
    page = _client(org.dev_a).get(reverse("gpu-request-page", kwargs={"pk": waiting.pk}))
    assert "Any that fits" in page.content.decode()
