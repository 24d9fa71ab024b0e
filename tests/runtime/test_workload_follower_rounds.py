"""A follower round with a cluster it cannot reach: the failure is recorded on that cluster and
no heartbeat is left for it, so the periodic sync keeps trying it; a cluster that cannot watch
(the simulated one) is not followed at all. (The round that follows a reachable cluster runs on
the test bed: tests/k8s/test_workload_follower.py.)"""

from __future__ import annotations

from typing import Any

import pytest

from runtime import tasks
from runtime.services import execution, workload_follower
from scheduling.models import Cluster, local_cluster_id
from tests.support.clusters import kubeconfig_text, make_cluster
from tests.support.personas import Org

pytestmark = pytest.mark.django_db


def test_an_unreachable_cluster_is_recorded_and_left_to_the_periodic_sync(
    org: Org, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = Cluster.objects.get(pk=local_cluster_id())
    # Nothing listens on port 1 of the loopback: every call is refused.
    east = make_cluster(org.admin, kubeconfig_text=kubeconfig_text("https://127.0.0.1:1"))
    assert workload_follower.follow_round() == []
    east.refresh_from_db()
    assert east.last_error
    assert not workload_follower.is_followed(east)
    assert not workload_follower.is_followed(local)  # simulated: nothing to watch

    periodic: list[str] = []

    def periodic_sync(*, backend: Any, cluster: Cluster) -> dict[str, int]:
        periodic.append(cluster.slug)
        return {}

    monkeypatch.setattr(execution, "sync_watched_workloads", periodic_sync)
    tasks.sync_workloads()
    assert sorted(periodic) == sorted([local.slug, east.slug])


def test_follow_stops_after_its_rounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workload_follower, "IDLE_SECONDS", 0.0)
    assert workload_follower.follow(lambda: False, max_rounds=2) == 2
    assert workload_follower.follow(lambda: True, max_rounds=2) == 0
