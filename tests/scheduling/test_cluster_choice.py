"""A flavor offered in pools of two clusters: the engine places where there is room, a request
that names a cluster stays there, and the launch goes to the cluster of the chosen pool."""

from __future__ import annotations

import pytest

from runtime.cluster.kubernetes import KubernetesClusterBackend
from runtime.services import execution
from scheduling.models import Allocation, Cluster, GpuRequest, Quota
from scheduling.services import cycle
from tests.support.clusters import make_cluster
from tests.support.factories import (
    GpuDeviceFactory,
    GpuRequestFactory,
    NodeFactory,
    NodePoolFactory,
    ready_flavor,
)
from tests.support.personas import Org

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_clusters(org: Org) -> tuple[object, object, object]:
    """Team A's flavor: 4 cards in the local cluster, and 4 more in the `east` cluster."""
    flavor = ready_flavor(team=org.team_a, gpus=4)
    Quota.objects.filter(team=org.team_a, flavor=flavor).update(guaranteed=8, limit=8)
    east = make_cluster(org.admin, "east")
    east_pool = NodePoolFactory.create(cluster=east, tier=flavor.pool.tier, slug="east-a100")
    node = NodeFactory.create(pool=east_pool, name="east-node-1", gpu_model=flavor.gpu_model)
    for index in range(4):
        GpuDeviceFactory.create(node=node, index=index, memory_mib=flavor.gpu_memory_mib)
    flavor.other_pools.add(east_pool)
    return flavor, east, east_pool


def _submit(org: Org, flavor: object, cluster: Cluster | None = None) -> GpuRequest:
    request = GpuRequestFactory.create(
        project=org.project_a, flavor=flavor, gpu_count=4, to="queued"
    )
    GpuRequest.objects.filter(pk=request.pk).update(cluster=cluster)
    return request


def test_the_engine_uses_both_clusters_pools(org: Org, two_clusters: tuple) -> None:
    flavor, _, east_pool = two_clusters
    first, second = _submit(org, flavor), _submit(org, flavor)
    result = cycle.run_cycle()
    assert sorted(result.admitted) == sorted([first.pk, second.pk])
    pools = set(
        Allocation.objects.filter(request__in=[first, second]).values_list("pool", flat=True)
    )
    assert pools == {flavor.pool.pk, east_pool.pk}


def test_a_request_naming_a_cluster_waits_for_room_there(org: Org, two_clusters: tuple) -> None:
    flavor, _, _ = two_clusters
    local = Cluster.objects.get(slug="local")
    first = _submit(org, flavor, cluster=local)
    second = _submit(org, flavor, cluster=local)
    result = cycle.run_cycle()
    assert result.admitted == [first.pk]
    second.refresh_from_db()
    assert second.status == "queued"
    assert Allocation.objects.get(request=first).pool == flavor.pool


def test_an_attempt_runs_on_the_backend_of_its_pools_cluster(org: Org, two_clusters: tuple) -> None:
    flavor, east, east_pool = two_clusters
    request = _submit(org, flavor, cluster=east)
    assert cycle.run_cycle().admitted == [request.pk]
    request.refresh_from_db()
    assert execution.attempt_cluster(request.pk, request.attempt) == east
    backend = execution.attempt_backend(request.pk, request.attempt)
    assert isinstance(backend, KubernetesClusterBackend)
    assert backend.api_client.configuration.host == east.api_server
    assert execution.backend_for(Cluster.objects.get(slug="local")) is execution.cluster_backend()
