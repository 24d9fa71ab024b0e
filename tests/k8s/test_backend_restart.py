"""The API server restarted mid-sync: calls fail as transient while it is down, the watch's old
resource version is gone afterwards (410 → resync), and a re-list converges with nothing lost."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.cluster.base import TransientClusterError, WorkloadEvent
from tests.k8s.conftest import eventually
from tests.k8s.helpers import job, runs_for

pytestmark = pytest.mark.k8s


def drain(backend: Any, version: str, *, timeout_seconds: int = 2) -> list[WorkloadEvent]:
    return list(backend.watch_workloads(version, timeout_seconds=timeout_seconds))


def test_the_backend_converges_after_an_api_server_restart(
    k8s_backend: Any, k8s_project: str, k8s_testbed: Any
) -> None:
    (start,) = list(k8s_backend.watch_workloads(None))
    assert start.type == "resync" and start.resource_version
    long = job(k8s_project, annotations=runs_for("1h"))
    short = job(k8s_project, annotations=runs_for("4s"))
    k8s_backend.launch(long)
    k8s_backend.launch(short)
    events = drain(k8s_backend, start.resource_version)
    assert any(e.type == "changed" and e.request_id == long.request_id for e in events)
    eventually(lambda: k8s_backend.get_workload(k8s_project, long.request_id, 1).phase == "running")

    k8s_testbed.stop_apiserver()
    try:
        with pytest.raises(TransientClusterError):
            k8s_backend.get_workload(k8s_project, long.request_id, 1)
        with pytest.raises(TransientClusterError):
            drain(k8s_backend, start.resource_version)
    finally:
        k8s_testbed.start_apiserver_again()
    # History before the restart is compacted away: the old version can only answer 410.
    k8s_testbed.compact_etcd()
    after = eventually(
        lambda: _try(lambda: drain(k8s_backend, start.resource_version)), what="a watch answer"
    )
    assert after[-1].type == "resync", after
    version = after[-1].resource_version
    assert int(version) > int(start.resource_version)

    # The portal's loop: re-list, then watch on from the fresh version.
    statuses = eventually(
        lambda: (
            (found := {w.request_id: w for w in k8s_backend.list_workloads([k8s_project])}).get(
                short.request_id
            )
            and found[short.request_id].phase == "succeeded"
            and found
        ),
        what="the short job's success seen after the restart",
    )
    assert statuses[long.request_id].phase == "running"
    events = drain(k8s_backend, version)
    assert all(e.type != "resync" for e in events)
    k8s_backend.terminate(k8s_project, long.request_id, 1, reason="t", grace_seconds=0)
    k8s_backend.terminate(k8s_project, short.request_id, 1, reason="t", grace_seconds=0)


def _try(fn: Any) -> Any:
    try:
        return fn()
    except TransientClusterError:
        return None  # the API server is still warming up
