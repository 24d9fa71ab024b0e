"""The scheduler mode is per cluster: in one cycle Kueue gets the requests of its clusters and
the engine places the rest on a snapshot without them; the submit check, the Kueue policy and
its drift record follow each cluster's mode."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from runtime import tasks
from runtime.services import kueue_policy
from scheduling.choices import RequestStatus
from scheduling.models import Allocation, Cluster, Flavor, GpuRequest, Quota
from scheduling.selectors.scheduler_modes import kueue_cluster_ids
from scheduling.services import cycle
from scheduling.services.kueue_drift import last_check, record_check
from tests.scheduling.helpers import request_body
from tests.support.clusters import make_cluster
from tests.support.factories import (
    GpuDeviceFactory,
    GpuRequestFactory,
    NodeFactory,
    NodePoolFactory,
    api_submit,
    ready_flavor,
)
from tests.support.personas import Org

pytestmark = pytest.mark.django_db


def _queued(org: Org, flavor: Flavor, cluster: Cluster | None = None, **fields: Any) -> GpuRequest:
    fields = {"gpu_count": 2, **fields}
    request = GpuRequestFactory.create(
        project=org.project_a, flavor=flavor, kind="job", to="queued", **fields
    )
    GpuRequest.objects.filter(pk=request.pk).update(cluster=cluster)
    return request


@pytest.fixture
def east(org: Org) -> Cluster:
    """A registered cluster admitted by Kueue."""
    return make_cluster(org.admin, "east", scheduler="kueue")


@pytest.fixture
def local_flavor(org: Org) -> Flavor:
    """Team A's flavor on the local cluster: one node with 4 cards."""
    return ready_flavor(team=org.team_a, gpus=4)


@pytest.fixture
def east_flavor(org: Org, east: Cluster) -> Flavor:
    """Team A's flavor whose own pool is on `east`."""
    return ready_flavor(team=org.team_a, gpus=4, pool__cluster=east, pool__slug="east-a100")


@pytest.fixture
def seen_snapshots(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every snapshot the engine is given."""
    seen: list[Any] = []
    plan = cycle.planner.plan

    def spy(snapshot: Any, **kwargs: Any) -> Any:
        seen.append(snapshot)
        return plan(snapshot, **kwargs)

    monkeypatch.setattr(cycle.planner, "plan", spy)
    return seen


def test_one_cycle_hands_kueue_clusters_requests_over_and_places_the_rest(
    org: Org, east: Cluster, local_flavor: Flavor, east_flavor: Flavor, seen_snapshots: list[Any]
) -> None:
    here = _queued(org, local_flavor)
    there = _queued(org, east_flavor)
    admitted: list[tuple[int, int]] = []

    result = cycle.run_cycle(on_admit=lambda r, a: admitted.append((r, a)))

    assert result.ran and sorted(result.admitted) == sorted([here.pk, there.pk])
    placed = Allocation.objects.get(request=here)
    assert placed.pool == local_flavor.pool and placed.node_name and placed.claims
    handed = Allocation.objects.get(request=there)
    assert (handed.pool, handed.node_name, handed.claims) == (east_flavor.pool, "", [])
    assert GpuRequest.objects.get(pk=there.pk).status == RequestStatus.ADMITTED
    # The engine never saw the Kueue cluster's pool, nodes or request.
    (snapshot,) = seen_snapshots
    assert {pool.name for pool in snapshot.pools} == {local_flavor.pool.slug}
    assert all(node.pool == local_flavor.pool.slug for node in snapshot.nodes)
    assert [r.id for r in snapshot.pending] == [str(here.pk)]


def test_a_kueue_clusters_allocations_are_not_in_the_engines_snapshot(
    org: Org, east: Cluster, local_flavor: Flavor, east_flavor: Flavor, seen_snapshots: list[Any]
) -> None:
    there = _queued(org, east_flavor)
    cycle.run_cycle()
    assert Allocation.objects.active().filter(request=there).exists()
    here = _queued(org, local_flavor)
    cycle.run_cycle()
    assert [a.request_id for a in seen_snapshots[-1].allocations] == []
    assert Allocation.objects.filter(request=here).exclude(node_name="").exists()


def test_a_local_kueue_cluster_beside_a_portal_mode_one(
    org: Org, settings: Any, local_flavor: Flavor, seen_snapshots: list[Any]
) -> None:
    settings.SCHEDULER = "kueue"
    west = make_cluster(org.admin, "west", scheduler="portal")
    west_flavor = ready_flavor(team=org.team_a, gpus=4, pool__cluster=west, pool__slug="west")
    assert kueue_cluster_ids() == {Cluster.objects.get(slug="local").pk}
    here, there = _queued(org, local_flavor), _queued(org, west_flavor)

    assert sorted(cycle.run_cycle().admitted) == sorted([here.pk, there.pk])

    assert Allocation.objects.get(request=here).node_name == ""
    assert Allocation.objects.get(request=there).node_name.startswith("gpu-node-")
    assert [r.id for r in seen_snapshots[0].pending] == [str(there.pk)]


def test_only_kueue_clusters_means_no_engine(
    org: Org, east: Cluster, east_flavor: Flavor, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.SCHEDULER = "kueue"

    def no_engine(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("no portal-mode cluster: the engine must not plan")

    monkeypatch.setattr(cycle.planner, "plan", no_engine)
    local = ready_flavor(team=org.team_a, gpus=4)
    requests = [_queued(org, east_flavor), _queued(org, local)]
    assert sorted(cycle.run_cycle().admitted) == sorted(r.pk for r in requests)


@pytest.fixture
def mixed_flavor(org: Org, east: Cluster, local_flavor: Flavor) -> Flavor:
    """The local flavor also offered in a pool of the Kueue cluster `east`."""
    east_pool = NodePoolFactory.create(cluster=east, tier=local_flavor.pool.tier, slug="east-x")
    node = NodeFactory.create(pool=east_pool, name="east-node-1", gpu_model=local_flavor.gpu_model)
    for index in range(4):
        GpuDeviceFactory.create(node=node, index=index, memory_mib=local_flavor.gpu_memory_mib)
    local_flavor.other_pools.add(east_pool)
    Quota.objects.filter(team=org.team_a, flavor=local_flavor).update(guaranteed=8, limit=8)
    return local_flavor


def test_a_flavor_over_both_modes_is_placed_by_the_engine_only_in_portal_pools(
    org: Org, east: Cluster, mixed_flavor: Flavor
) -> None:
    first = _queued(org, mixed_flavor, gpu_count=4)
    second = _queued(org, mixed_flavor, gpu_count=4)

    assert cycle.run_cycle().admitted == [first.pk]

    assert Allocation.objects.get(request=first).pool == mixed_flavor.pool
    second.refresh_from_db()
    assert second.status == RequestStatus.QUEUED  # the east pool is Kueue's, not the engine's


def test_naming_the_kueue_cluster_hands_the_request_to_kueue_in_its_pool(
    org: Org, east: Cluster, mixed_flavor: Flavor
) -> None:
    request = _queued(org, mixed_flavor, cluster=east)
    assert cycle.run_cycle().admitted == [request.pk]
    allocation = Allocation.objects.select_related("pool").get(request=request)
    assert (allocation.pool.slug, allocation.node_name) == ("east-x", "")


def test_naming_a_portal_cluster_lets_the_engine_place_a_kueue_flavor_there(
    org: Org, east: Cluster, east_flavor: Flavor, seen_snapshots: list[Any]
) -> None:
    local_pool = NodePoolFactory.create(tier=east_flavor.pool.tier, slug="local-x")
    node = NodeFactory.create(pool=local_pool, gpu_model=east_flavor.gpu_model)
    for index in range(4):
        GpuDeviceFactory.create(node=node, index=index, memory_mib=east_flavor.gpu_memory_mib)
    east_flavor.other_pools.add(local_pool)
    local = Cluster.objects.get(slug="local")
    named, unnamed = _queued(org, east_flavor, cluster=local), _queued(org, east_flavor)

    assert sorted(cycle.run_cycle().admitted) == sorted([named.pk, unnamed.pk])

    assert Allocation.objects.get(request=named).node_name == node.name
    assert Allocation.objects.get(request=unnamed).pool == east_flavor.pool  # Kueue's
    (pending,) = seen_snapshots[0].pending
    assert (pending.id, pending.pools) == (str(named.pk), ("local-x",))


def test_only_jobs_are_taken_where_kueue_admits(
    org: Org, east: Cluster, local_flavor: Flavor, east_flavor: Flavor
) -> None:
    for kind in ("notebook", "service"):
        response = api_submit(
            org.dev_a, request_body(org.project_a, east_flavor, kind=kind), status=400
        )
        message = response.json()["error"]["fields"]["kind"]
        assert "batch jobs only under SCHEDULER=kueue: cluster East" in message
    api_submit(org.dev_a, request_body(org.project_a, east_flavor, kind="job"), status=201)
    api_submit(org.dev_a, request_body(org.project_a, local_flavor, kind="notebook"), status=201)


def test_a_notebook_may_name_a_portal_mode_cluster_under_scheduler_kueue(
    org: Org, settings: Any, mixed_flavor: Flavor
) -> None:
    settings.SCHEDULER = "kueue"
    Cluster.objects.filter(slug="east").update(scheduler="portal")
    body = request_body(org.project_a, mixed_flavor, kind="notebook")
    api_submit(org.dev_a, body, status=400)  # the flavor's own pool is local: Kueue's
    api_submit(org.dev_a, {**body, "cluster": "east"}, status=201)


def test_the_policy_of_each_cluster_holds_its_pools_and_quotas(
    org: Org, east: Cluster, local_flavor: Flavor, east_flavor: Flavor
) -> None:
    Quota.objects.filter(team=org.team_a, flavor=east_flavor).update(guaranteed=3, limit=4)
    Quota.objects.create(team=org.team_b, flavor=east_flavor, guaranteed=1, limit=2)
    gpu = "nvidia.com/gpu"

    east_policy = kueue_policy.current_policy(east)
    local_policy = kueue_policy.current_policy()

    assert [pool.name for pool in east_policy.pools] == ["east-a100"]
    assert [pool.name for pool in local_policy.pools] == [local_flavor.pool.slug]
    queues = {team.team_slug: team for team in east_policy.teams}
    assert queues[org.team_a.slug].quotas == {("east-a100", gpu): (3, 4)}
    assert queues[org.team_b.slug].quotas == {("east-a100", gpu): (1, 2)}
    # Weights are the teams' shares of the guaranteed quota on this cluster.
    assert (queues[org.team_a.slug].weight, queues[org.team_b.slug].weight) == (
        pytest.approx(0.75),
        pytest.approx(0.25),
    )
    local_queues = {team.team_slug: team for team in local_policy.teams}
    assert local_queues[org.team_a.slug].quotas == {(local_flavor.pool.slug, gpu): (2, 4)}
    # Projects have a LocalQueue on every Kueue cluster.
    assert east_policy.project_namespaces == local_policy.project_namespaces


def test_a_flavors_other_pool_carries_its_quota_on_that_cluster(
    org: Org, east: Cluster, mixed_flavor: Flavor
) -> None:
    policy = kueue_policy.current_policy(east)
    assert [pool.name for pool in policy.pools] == ["east-x"]
    queues = {team.team_slug: team for team in policy.teams}
    assert queues[org.team_a.slug].quotas == {("east-x", "nvidia.com/gpu"): (8, 8)}


def test_the_reconcile_runs_on_each_kueue_cluster_and_records_each(
    org: Org, east: Cluster, local_flavor: Flavor, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []

    def reconcile(*, apply: bool, cluster: Cluster) -> list[str]:
        calls.append(cluster.slug)
        return ["update ClusterQueue gpu-portal-team-a (spec.fairSharing.weight)"]

    monkeypatch.setattr(kueue_policy, "reconcile", reconcile)
    assert tasks.reconcile_kueue_policy() == 1
    assert calls == ["east"]  # the local cluster runs the portal's engine
    check = last_check("east")
    assert check is not None and check.cluster == "east" and len(check.differences) == 1
    assert last_check() is None


def test_the_reconcile_does_nothing_without_kueue_clusters(
    org: Org, local_flavor: Flavor, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kueue_policy, "reconcile", lambda **kw: pytest.fail("no Kueue cluster"))
    assert tasks.reconcile_kueue_policy() == 0


def test_fleet_page_and_metrics_name_the_cluster_of_each_check(org: Org, east: Cluster) -> None:
    record_check(["delete LocalQueue gpu-team-a-old/gpu-portal"], applied=True, cluster="east")
    client = Client()
    client.force_login(org.admin)
    page = client.get(reverse("fleet-page")).content.decode()
    assert "Kueue policy on East" in page
    assert "delete LocalQueue gpu-team-a-old/gpu-portal" in page
    assert 'data-cluster="local"' not in page.split('data-testid="fleet"')[0]
    body = Client().get(reverse("metrics")).content.decode()
    assert 'gpu_portal_kueue_policy_drift_objects{cluster="east"} 1.0' in body


def test_kueue_policy_command_refuses_an_unknown_cluster(org: Org) -> None:
    with pytest.raises(CommandError, match="No cluster 'nowhere'"):
        call_command("kueue_policy", "--diff", "--cluster", "nowhere", stdout=StringIO())
