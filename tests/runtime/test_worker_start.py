"""A Celery worker loads the Kubernetes client before it forks its pool, so that no pool
process spends its first launch importing it (15-20 s each in the notebook benchmark)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from django.conf import settings

# In a fresh interpreter: build the worker as `celery worker` does (which sends `worker_init`
# in the main process, before the pool starts), then a backend as a pool process does.
WORKER_THEN_BACKEND = """
import json, sys
from portal.celery import app

app.WorkController(pool_cls="prefork", concurrency=1, hostname="test@start")
loaded = {name for name in sys.modules if name.startswith("kubernetes")}

from kubernetes.client import ApiClient, Configuration
from runtime.cluster.kubernetes import KubernetesClusterBackend

KubernetesClusterBackend(api_client=ApiClient(Configuration(host="https://127.0.0.1:1")))
print(json.dumps({
    "core_api_loaded": "kubernetes.client.api.core_v1_api" in loaded,
    "imported_by_the_backend": sorted(
        name for name in sys.modules if name.startswith("kubernetes") and name not in loaded
    ),
}))
"""


def test_a_worker_loads_the_cluster_client_before_it_forks_its_pool() -> None:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings"}
    started = subprocess.run(
        [sys.executable, "-c", WORKER_THEN_BACKEND],
        env=env,
        cwd=settings.BASE_DIR,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert started.returncode == 0, started.stderr[-2000:]
    answer = json.loads(started.stdout.strip().splitlines()[-1])
    assert answer == {"core_api_loaded": True, "imported_by_the_backend": []}
