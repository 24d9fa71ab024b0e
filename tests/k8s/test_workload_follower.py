"""The workload follower (`manage.py follow_workloads`) as its own process against the real API
server: requests move as their pods run and finish (the test bed's Job pods finish at once),
with no periodic sync at all, and while it follows a cluster the periodic sync passes that
cluster by."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.core.cache import cache

from runtime import tasks
from runtime.services import execution, workload_follower
from scheduling.choices import RequestStatus
from scheduling.models import Cluster, GpuRequest, local_cluster_id
from scheduling.services import cycle
from scripts.testbed.cluster import Testbed
from tests.k8s.conftest import Admin, approved_requests, eventually
from tests.support import worker

pytestmark = [pytest.mark.k8s, pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@contextlib.contextmanager
def follower(testbed: Testbed, redis_url: str, log: Any) -> Iterator[subprocess.Popen[str]]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "DATABASE_URL": worker.test_database_url(),
        "REDIS_URL": redis_url,
        "CELERY_BROKER_URL": redis_url,
        "CELERY_TASK_ALWAYS_EAGER": "false",
        "CLUSTER_BACKEND": "kubernetes",
        "KUBECONFIG": str(testbed.portal_kubeconfig),
    }
    process = subprocess.Popen(  # noqa: S603 - our own argv
        [sys.executable, "manage.py", "follow_workloads"],
        cwd=django_settings.BASE_DIR,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_the_follower_moves_requests_with_their_pods_and_the_periodic_sync_steps_aside(
    k8s_testbed: Testbed,
    k8s_backend: Any,
    k8s_admin: Admin,
    clean_redis: str,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings.CLUSTER_BACKEND = "kubernetes"
    settings.KUBECONFIG = str(k8s_testbed.portal_kubeconfig)
    execution.cluster_backend.cache_clear()
    requests = approved_requests(k8s_backend)
    project = requests[0].project
    cluster = Cluster.objects.get(pk=local_cluster_id())
    periodic: list[str] = []

    def periodic_sync(*, backend: Any, cluster: Cluster) -> dict[str, int]:
        periodic.append(cluster.slug)
        return {}

    monkeypatch.setattr(execution, "sync_watched_workloads", periodic_sync)
    log = tempfile.TemporaryFile("w+")  # noqa: SIM115 - closed in `finally`

    def output() -> str:
        log.seek(0)
        return log.read()[-4000:]

    try:
        with follower(k8s_testbed, clean_redis, log) as process:
            cycle.run_cycle()
            for request in requests:
                execution.launch_request(request_id=request.pk, attempt=1, backend=k8s_backend)

            def statuses() -> set[str]:
                ids = [r.pk for r in requests]
                return set(GpuRequest.objects.filter(pk__in=ids).values_list("status", flat=True))

            # Nothing in this process syncs: the follower moves them.
            eventually(
                lambda: statuses() == {RequestStatus.SUCCEEDED},
                timeout=60,
                what=f"every request finished, moved by the follower\n{output()}",
            )
            assert workload_follower.is_followed(cluster)
            tasks.sync_workloads()
            assert periodic == [], "the periodic sync left the followed cluster alone"

            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=30) == 0, output()
            assert "followed the clusters' workloads for" in output()
        # The follower stopped: once its heartbeat expires the periodic sync takes over.
        cache.delete(workload_follower.heartbeat_key(cluster))
        tasks.sync_workloads()
        assert periodic == [cluster.slug]
    finally:
        log.close()
        k8s_admin.core.delete_namespace(project.namespace, _preload_content=False)
