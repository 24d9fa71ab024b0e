"""The cluster API unreachable for a while (kube-apiserver of the real test bed stopped), with a
real worker on the kubernetes backend: launches and syncs retry, everything converges, no Job
is created twice.

Needs the test bed (K8S_TESTBED=1, `make testbed`); CI runs it with the rest of the suite.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from typing import Any

import pytest

from runtime.cluster.base import REQUEST_LABEL
from runtime.inventory import apply_inventory
from scheduling.choices import RequestStatus
from scheduling.demo import seed_demo_fleet
from scheduling.models import Allocation, Flavor, GpuRequest, Quota
from tenants.models import Project
from tests.faults.conftest import report, sizes
from tests.faults.pipeline import status_counts, wait_until_settled
from tests.faults.pipeline import submit_and_approve as submit_and_approve_in
from tests.k8s.conftest import k8s_admin, k8s_backend, k8s_testbed  # noqa: F401 — fixtures
from tests.support.personas import Org
from tests.support.services import RedisServer
from tests.support.worker import celery_worker

pytestmark = [
    pytest.mark.faults,
    pytest.mark.k8s,
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
]


def test_cluster_api_outage_mid_flow_converges_without_duplicate_jobs(
    on_postgresql: None,
    org: Org,
    own_redis: RedisServer,
    k8s_testbed: Any,  # noqa: F811
    k8s_backend: Any,  # noqa: F811
    k8s_admin: Any,  # noqa: F811
) -> None:
    total, outage = sizes("K8S_REQUESTS", 8), sizes("OUTAGE_SECONDS", 60)
    seed_demo_fleet(teams={"vision": org.team_a, "speech": org.team_b})
    apply_inventory(k8s_backend.sync_inventory())
    flavor = Flavor.objects.get(slug="a100-80g")
    Quota.objects.filter(team=org.team_a, flavor=flavor, project__isnull=True).update(
        guaranteed=total + 16, limit=total + 16
    )
    # A project of its own, so its namespace (and Job names) are new to the cluster.
    org.project_a = Project.objects.create(
        team=org.team_a, slug=f"f{uuid.uuid4().hex[:8]}", name="Fault suite"
    )
    namespace = org.project_a.namespace
    env = {"CLUSTER_BACKEND": "kubernetes", "KUBECONFIG": str(k8s_testbed.portal_kubeconfig)}
    with celery_worker(own_redis.url(), STUCK_SWEEP_SECONDS="3", **env) as worker:
        ids = submit_and_approve_in(org, flavor, total)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not status_counts(ids)["launching"]:
            time.sleep(0.2)
        k8s_testbed.restart_apiserver(down_seconds=outage)
        back = time.monotonic()
        wait_until_settled(ids, timeout=300, log=worker.output)
        converge = time.monotonic() - back
    jobs = Counter(
        job.metadata.labels.get(REQUEST_LABEL, job.metadata.name)
        for job in k8s_admin.batch.list_namespaced_job(namespace).items
    )
    requests = GpuRequest.objects.filter(pk__in=ids)
    duplicates = [r.pk for r in requests if r.attempt != 1 or r.allocations.count() != 1]
    report(
        {
            "fault": "cluster_api_outage",
            "outage_seconds": outage,
            "converge_seconds_after_api_back": round(converge, 1),
            "jobs": sum(jobs.values()),
            "statuses": dict(status_counts(ids)),
            "duplicates": len(duplicates) + sum(max(0, n - 1) for n in jobs.values()),
        }
    )
    reasons = {r.pk: (r.status, r.status_reason) for r in requests}
    assert sum(jobs.values()) == total and all(n == 1 for n in jobs.values()), (jobs, reasons)
    assert not duplicates
    assert set(requests.values_list("status", flat=True)) <= {
        RequestStatus.SUCCEEDED,
        RequestStatus.FAILED,
    }
    assert not Allocation.objects.filter(request_id__in=ids, ended_at__isnull=True).exists()
