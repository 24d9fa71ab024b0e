"""SCHEDULER=kueue against the real Kueue v0.17 controller on a test bed of its own.

The portal's services drive the whole path (submit → approve → cycle hands the request to Kueue
→ the launch creates a suspended Job in the project's LocalQueue → Kueue admits or holds it →
sync reads the Workload back); tasks run inline against this bed. Kueue alone decides: quota,
borrowing within the cohort, preemption for a higher priority; the portal's view (status,
waiting_reason, queue position) is checked against Kueue's own Workload objects.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import replace
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command

from runtime.cluster.base import WorkloadSpec
from runtime.services import execution
from scheduling.choices import RequestStatus
from scheduling.models import Allocation, GpuRequest, Quota
from scheduling.services.requests import cancel_gpu_request
from scripts.testbed.cluster import Testbed, whole_card_node
from tenants.models import AuditEvent
from tests.k8s.conftest import eventually
from tests.k8s.helpers import kueue_testbed, runs_for
from tests.support.factories import GpuRequestFactory
from tests.support.fleet import Fleet, make_fleet
from tests.support.personas import Org

pytestmark = [pytest.mark.k8s, pytest.mark.django_db]

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
IMAGE = "registry.example.com/ml/train:1.0"


@pytest.fixture(scope="module")
def kueue_bed() -> Iterator[Testbed]:
    """A control plane with Kueue's controller, apart from the session's shared bed."""
    if os.environ.get("K8S_TESTBED") != "1":
        pytest.skip("the Kubernetes test bed is off: set K8S_TESTBED=1")
    with kueue_testbed([whole_card_node(f"a100-{i}") for i in range(2)]) as bed:
        yield bed


class Kwok:
    """The portal's backend, with kwok told how long each launched pod runs (an hour unless
    `runs` says otherwise; None: kwok's default, 1-3 s)."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.runs: str | None = "1h"

    def launch(self, spec: WorkloadSpec) -> str:
        if self.runs is not None:
            spec = replace(
                spec, extra_annotations={**spec.extra_annotations, **runs_for(self.runs)}
            )
        name: str = self.backend.launch(spec)
        return name

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)


class KueuePortal:
    """The portal under SCHEDULER=kueue on the bed, with the steps a test takes."""

    def __init__(self, bed: Testbed, org: Org, fleet: Fleet, capture: Any) -> None:
        from kubernetes import client as k8s

        from runtime.cluster.kubernetes import KubernetesClusterBackend

        self.org, self.fleet, self.capture = org, fleet, capture
        self.backend = Kwok(KubernetesClusterBackend(kubeconfig=str(bed.portal_kubeconfig)))
        admin = bed.api_client()
        self.objects: Any = k8s.CustomObjectsApi(admin)
        self.batch: Any = k8s.BatchV1Api(admin)
        self.core: Any = k8s.CoreV1Api(admin)

    def submit(self, project: Any, gpu_count: int, priority: str = "normal") -> GpuRequest:
        """Submitted, approved by the lead, handed to Kueue and launched (tasks run inline)."""
        with self.capture(execute=True):
            request = GpuRequestFactory.create(
                project=project,
                flavor=self.fleet.a100,
                kind="job",
                gpu_count=gpu_count,
                priority=priority,
                image=IMAGE,
                to="queued",
            )
        request.refresh_from_db()
        assert request.status == RequestStatus.LAUNCHING, request.status_reason
        return request

    def sync(self) -> None:
        with self.capture(execute=True):
            execution.sync_workloads(backend=self.backend)

    def status_of(self, *requests: GpuRequest) -> list[str]:
        self.sync()
        for request in requests:
            request.refresh_from_db()
        return [request.status for request in requests]

    def until(self, request: GpuRequest, status: str, *, timeout: float = 60) -> GpuRequest:
        eventually(
            lambda: self.status_of(request) == [status],
            timeout=timeout,
            what=f"request {request.pk} {status}",
        )
        return request

    def job(self, request: GpuRequest) -> Any:
        name = f"gpr-{request.pk}-a{request.attempt}"
        return self.batch.read_namespaced_job(name, request.project.namespace)

    def job_names(self, request: GpuRequest) -> list[str]:
        jobs = self.batch.list_namespaced_job(
            request.project.namespace, label_selector=f"gpu-portal/request={request.pk}"
        ).items
        return sorted(job.metadata.name for job in jobs)

    def workload(self, request: GpuRequest) -> dict[str, Any]:
        """Kueue's Workload for the request's current attempt."""
        name = f"gpr-{request.pk}-a{request.attempt}"

        def find() -> dict[str, Any] | None:
            items = self.objects.list_namespaced_custom_object(
                GROUP, VERSION, request.project.namespace, "workloads"
            )["items"]
            for item in items:
                owners = item["metadata"].get("ownerReferences") or []
                if any(o["name"] == name for o in owners):
                    return dict(item)
            return None

        found: dict[str, Any] = eventually(find, timeout=30, what=f"the Workload of {name}")
        return found

    def pending_message(self, request: GpuRequest) -> str:
        """The message of the Workload's QuotaReserved condition while Kueue holds it."""

        def message() -> str:
            conditions = {
                c["type"]: c for c in self.workload(request)["status"].get("conditions", [])
            }
            reserved = conditions.get("QuotaReserved", {})
            return str(reserved.get("message", "")) if reserved.get("status") == "False" else ""

        found: str = eventually(message, timeout=30, what="Kueue's pending reason")
        return found

    def shows_kueues_reason(self, request: GpuRequest) -> bool:
        """Kueue holds the request, and the portal shows the Workload's own reason for it."""
        message = self.pending_message(request)
        return self.status_of(request) == [RequestStatus.LAUNCHING] and (
            request.waiting_reason == message
        )


@pytest.fixture
def kueue_portal(
    kueue_bed: Testbed,
    org: Org,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> Iterator[KueuePortal]:
    settings.SCHEDULER = "kueue"
    settings.KUBECONFIG = str(kueue_bed.portal_kubeconfig)
    settings.KUBE_CONTEXT = None
    fleet = make_fleet(org)
    # Team B: no guaranteed A100s, but a limit of 4 — it runs only on what it can borrow.
    fleet.a100.pool.tier.allowed_teams.add(org.team_b)
    Quota.objects.create(team=org.team_b, flavor=fleet.a100, guaranteed=0, limit=4)
    portal = KueuePortal(kueue_bed, org, fleet, django_capture_on_commit_callbacks)
    # Tasks queued by the services (launch, terminate, cycle) reach this bed.
    monkeypatch.setattr(execution, "cluster_backend", lambda: portal.backend)
    call_command("kueue_policy", "--apply", stdout=StringIO())
    yield portal
    # Leave the bed's quota free for the next test: every Job (and so its Workload) goes.
    for project in (org.project_a, org.project_a2, org.project_b):
        with contextlib.suppress(Exception):
            portal.batch.delete_collection_namespaced_job(
                project.namespace, propagation_policy="Background"
            )
    eventually(
        lambda: not portal.objects.list_cluster_custom_object(GROUP, VERSION, "workloads")["items"],
        timeout=60,
        what="no Workloads left",
    )


def admitted_to(workload: dict[str, Any]) -> tuple[str, str] | None:
    admission = workload.get("status", {}).get("admission")
    if not admission:
        return None
    flavors = admission["podSetAssignments"][0]["flavors"]
    return admission["clusterQueue"], flavors["nvidia.com/gpu"]


def test_a_job_runs_to_succeeded_through_kueue(kueue_portal: KueuePortal, org: Org) -> None:
    portal = kueue_portal
    portal.backend.runs = None  # kwok completes it in 1-3 s
    request = portal.submit(org.project_a, 2)

    job = portal.job(request)
    labels = job.metadata.labels
    assert labels["kueue.x-k8s.io/queue-name"] == "gpu-portal"
    assert labels["kueue.x-k8s.io/priority-class"] == "gpu-portal-normal"
    # No node chosen by the portal: no hostname pin; Kueue adds the flavor's node labels.
    assert "kubernetes.io/hostname" not in (job.spec.template.spec.node_selector or {})
    allocation = Allocation.objects.get(request=request)
    assert (allocation.node_name, allocation.claims) == ("", [])

    workload = portal.workload(request)
    eventually(
        lambda: admitted_to(portal.workload(request)) == ("gpu-portal-team-a", "a100-training"),
        what="Kueue admitted it in team A's queue",
    )
    assert workload["spec"]["priority"] == execution.PRIORITY_CLASSES["normal"].value
    portal.until(request, RequestStatus.SUCCEEDED)
    allocation.refresh_from_db()
    assert allocation.started_at is not None and allocation.ended_at is not None
    assert portal.job(request).spec.suspend is False
    # Kueue's controller rewrote its objects meanwhile (a weight of 0.602 comes back as 602m):
    # no drift for all that.
    out = StringIO()
    call_command("kueue_policy", "--diff", stdout=out)
    assert out.getvalue().startswith("no changes"), out.getvalue()


def test_kueue_holds_work_over_quota_and_preempts_it_for_higher_priority(
    kueue_portal: KueuePortal, org: Org
) -> None:
    portal = kueue_portal
    # Team A: 4 A100s guaranteed; the cohort has nothing to lend (team B's nominal is 0).
    first = portal.until(portal.submit(org.project_a, 4), RequestStatus.RUNNING)
    second = portal.submit(org.project_a, 2)
    third = portal.submit(org.project_a2, 2)  # another project, the same ClusterQueue

    # Kueue holds both; the portal shows Kueue's own reason and the queue's order.
    eventually(lambda: portal.shows_kueues_reason(second), what="the second shows Kueue's reason")
    eventually(lambda: portal.shows_kueues_reason(third), what="the third shows Kueue's reason")
    for request in (second, third):
        assert "insufficient unused quota for nvidia.com/gpu in flavor a100-training" in (
            request.waiting_reason
        )
        assert portal.job(request).spec.suspend is True
    assert (second.queue_position, third.queue_position) == (1, 2)
    assert second.status_reason == "Queued in Kueue: it starts when Kueue admits it."

    # A high-priority request: Kueue preempts the normal one running on the quota.
    with portal.capture(execute=True):
        cancel_gpu_request(actor=org.dev_a, request=third)
    urgent = portal.submit(org.project_a, 2, priority="high")
    portal.until(urgent, RequestStatus.RUNNING)
    assert admitted_to(portal.workload(urgent)) == ("gpu-portal-team-a", "a100-training")

    # The preempted request went back to Kueue as a new attempt, its old Job deleted.
    first.refresh_from_db()
    assert first.attempt == 2 and first.status == RequestStatus.LAUNCHING
    preempted = list(
        AuditEvent.objects.filter(target_id=str(first.pk), action="request.preempted").values_list(
            "message", flat=True
        )
    )
    assert preempted == [
        f"Kueue preempted it for request {urgent.pk} (prioritization in the ClusterQueue)."
    ]
    eventually(
        lambda: portal.job_names(first) == [f"gpr-{first.pk}-a2"],
        what="the first attempt's Job deleted",
    )
    # The second (normal, 2) fitted beside the urgent one; the first waits for quota.
    portal.until(second, RequestStatus.RUNNING)
    eventually(lambda: portal.shows_kueues_reason(first), what="the preempted one waits")
    assert first.queue_position == 1


def test_a_team_borrows_unused_quota_in_the_cohort_and_gives_it_back(
    kueue_portal: KueuePortal, org: Org
) -> None:
    portal = kueue_portal
    # Team B holds no guaranteed A100s: it runs on team A's idle ones, up to its limit.
    borrower = portal.until(portal.submit(org.project_b, 4), RequestStatus.RUNNING)
    assert admitted_to(portal.workload(borrower)) == ("gpu-portal-team-b", "a100-training")

    def borrowed() -> str:
        queue = portal.objects.get_cluster_custom_object_status(
            GROUP, VERSION, "clusterqueues", "gpu-portal-team-b"
        )
        for flavor in queue.get("status", {}).get("flavorsReservation", []):
            for resource in flavor["resources"]:
                if (flavor["name"], resource["name"]) == ("a100-training", "nvidia.com/gpu"):
                    return str(resource.get("borrowed", "0"))
        return "0"

    eventually(lambda: borrowed() == "4", what="team B's queue reports 4 A100s borrowed")

    # Team A wants its guaranteed quota back: Kueue reclaims it, the portal requeues team B's.
    owner = portal.submit(org.project_a, 4)
    portal.until(owner, RequestStatus.RUNNING)
    borrower.refresh_from_db()
    assert borrower.attempt == 2
    eventually(lambda: portal.shows_kueues_reason(borrower), what="the borrower waits")
    assert borrower.queue_position == 1
