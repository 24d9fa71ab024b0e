"""What the portal decides after a launch reaches the cluster, and the cluster's word reaches
the request: extensions move the deadline, a deadline reached is a timeout reclaim, crash loops
are retried per the tier, waits say why, quota changes are pushed, nodes are checked."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any, cast

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from runtime.cluster.base import NodeInventory, PrioritySpec, ProjectSpec, WorkloadStatus
from runtime.cluster.simulated import SimulatedCluster
from runtime.models import SimulatedWorkload
from runtime.services import execution
from runtime.services.inventory import apply_inventory
from scheduling.choices import RequestStatus
from scheduling.models import Allocation, GpuRequest, Node, ReclaimPolicy
from scheduling.selectors.snapshot import build_snapshot
from scheduling.services.governance import extend_runtime
from scheduling.services.quotas import delete_quota, set_quota
from tenants.models import AuditEvent
from tests.governance.conftest import Runner
from tests.scheduling.conftest import Fleet
from tests.support.factories import GpuRequestFactory
from tests.support.personas import Org

pytestmark = pytest.mark.django_db
BACKEND = SimulatedCluster(speed=1.0)


def status_of(request: GpuRequest, phase: str, reason: str = "", **fields: Any) -> WorkloadStatus:
    return WorkloadStatus(
        request_id=str(request.pk),
        attempt=request.attempt,
        phase=phase,  # type: ignore[arg-type]
        namespace=request.project.namespace,
        name=f"gpr-{request.pk}-a{request.attempt}",
        reason=reason,
        **fields,
    )


def launching(org: Org, fleet: Fleet) -> GpuRequest:
    """A request of team A's developer that the simulated cluster is asked to start."""
    return cast(
        GpuRequest, GpuRequestFactory(to="launching", project=org.project_a, flavor=fleet.l4_6g)
    )


# Runtime extension -------------------------------------------------------------------------


def test_an_extension_moves_the_running_jobs_deadline(
    running: Runner, org: Org, django_capture_on_commit_callbacks: Any
) -> None:
    request = running(minutes_ago=10)
    workload = SimulatedWorkload.objects.get(request_key=str(request.pk))
    # Counted from when it started running, not from its creation (the wait for a node).
    assert workload.deadline_at == workload.starts_at + timedelta(hours=4)
    assert workload.starts_at > workload.created_at
    with django_capture_on_commit_callbacks(execute=True):
        extend_runtime(actor=org.lead_a, request=request, seconds=3600)
    workload.refresh_from_db()
    started = Allocation.objects.get(request=request).started_at
    assert workload.deadline_at == (started or workload.starts_at) + timedelta(hours=5)


def test_a_job_the_cluster_stopped_at_its_deadline_is_a_timeout_reclaim(
    running: Runner, django_capture_on_commit_callbacks: Any
) -> None:
    request = running(minutes_ago=30)
    SimulatedWorkload.objects.filter(request_key=str(request.pk)).update(
        deadline_at=timezone.now() - timedelta(seconds=1),
        ends_at=timezone.now() + timedelta(hours=1),
    )
    with django_capture_on_commit_callbacks(execute=True):
        assert execution.sync_workloads(backend=BACKEND) == {RequestStatus.RECLAIMED: 1}
    request.refresh_from_db()
    assert request.status == RequestStatus.RECLAIMED
    assert request.status_reason == "Stopped: it reached its max runtime of 4 h."
    event = AuditEvent.objects.get(action="reclaim.timeout", target_id=str(request.pk))
    assert event.data["source"] == "the cluster stopped it at its deadline"
    assert Allocation.objects.get(request=request).end_reason == "reclaimed: timeout"
    assert not SimulatedWorkload.objects.filter(request_key=str(request.pk)).exists()


def test_a_job_that_ran_between_two_syncs_and_hit_its_deadline_is_reclaimed_too(
    org: Org, fleet: Fleet
) -> None:
    request = launching(org, fleet)
    started = timezone.now() - timedelta(hours=1)
    status = status_of(request, "failed", "DeadlineExceeded", started_at=started)
    assert execution.apply_workload_status(request, status) == RequestStatus.RECLAIMED
    assert Allocation.objects.get(request=request).started_at == started


def test_a_job_that_never_started_fails_at_its_deadline_with_the_clusters_reason(
    org: Org, fleet: Fleet
) -> None:
    request = launching(org, fleet)
    status = status_of(request, "failed", "DeadlineExceeded", message="Job was active too long")
    assert execution.apply_workload_status(request, status) == RequestStatus.FAILED
    request.refresh_from_db()
    assert "DeadlineExceeded" in request.status_reason


# Crash loops --------------------------------------------------------------------------------


@pytest.mark.parametrize(("max_attempts", "expected"), [(3, "queued"), (1, "failed")])
def test_crash_looping_work_is_retried_up_to_the_tiers_max_attempts(
    running: Runner, max_attempts: int, expected: str
) -> None:
    request = running(minutes_ago=5, kind="notebook")
    ReclaimPolicy.objects.filter(tier=request.flavor.pool.tier).update(max_attempts=max_attempts)
    message = "container keeps crashing: back-off 5m0s restarting failed container"
    status = status_of(request, "failed", "CrashLoopBackOff", message=message)
    assert execution.apply_workload_status(request, status) == expected
    request.refresh_from_db()
    assert request.status == expected
    assert "keeps crashing" in request.status_reason
    assert AuditEvent.objects.filter(action="reclaim.crash_loop", target_id=str(request.pk))
    assert Allocation.objects.active().filter(request=request).count() == 0


def crash(request: GpuRequest, exit_code: int, exit_reason: str) -> WorkloadStatus:
    message = f"container keeps crashing: container main exited with code {exit_code}"
    return status_of(
        request,
        "failed",
        "CrashLoopBackOff",
        message=message,
        exit_code=exit_code,
        exit_reason=exit_reason,
    )


def run_again(request: GpuRequest) -> GpuRequest:
    """The next attempt of a requeued request, running (as the cycle and a launch make it)."""
    attempt = request.attempt + 1
    pool = Allocation.objects.filter(request=request).first()
    assert pool is not None
    Allocation.objects.create(
        request=request, attempt=attempt, pool=pool.pool, started_at=timezone.now()
    )
    GpuRequest.objects.filter(pk=request.pk).update(status=RequestStatus.RUNNING, attempt=attempt)
    request.refresh_from_db()
    return request


def test_crashed_work_waits_out_a_backoff_the_cycle_respects(
    running: Runner, settings: Any
) -> None:
    settings.CRASH_RETRY_BASE_SECONDS = 60
    request = running(minutes_ago=5, kind="notebook")
    before = timezone.now()
    assert execution.apply_workload_status(request, crash(request, 1, "Error")) == "queued"
    request.refresh_from_db()
    assert request.retry_not_before is not None
    assert 59 <= (request.retry_not_before - before).total_seconds() <= 62
    assert request.blocker["code"] == "retry_backoff"
    assert request.blocker["message"].startswith("It crashed (Error (exit code 1)); retried at ")
    assert request.waiting_reason == request.blocker["message"]
    client = Client()
    client.force_login(request.owner)
    page = client.get(reverse("gpu-request-page", args=[request.pk])).content.decode()
    assert 'data-code="retry_backoff"' in page
    # Not in the engine's queue before its time; in it afterwards.
    assert str(request.pk) not in {r.id for r in build_snapshot().pending}
    GpuRequest.objects.filter(pk=request.pk).update(retry_not_before=timezone.now())
    assert str(request.pk) in {r.id for r in build_snapshot().pending}


def test_each_further_crash_doubles_the_backoff(running: Runner, settings: Any) -> None:
    settings.CRASH_RETRY_BASE_SECONDS, settings.CRASH_RETRY_MAX_SECONDS = 60, 100
    request = running(minutes_ago=5, kind="notebook")
    ReclaimPolicy.objects.filter(tier=request.flavor.pool.tier).update(max_attempts=5)
    delays = []
    for exit_code in (1, 2, 3):  # a different exit each time: retried each time
        before = timezone.now()
        assert execution.apply_workload_status(request, crash(request, exit_code, "Error")) == (
            "queued"
        )
        request.refresh_from_db()
        assert request.retry_not_before is not None
        delays.append(round((request.retry_not_before - before).total_seconds()))
        request = run_again(request)
    assert delays == [60, 100, 100]  # 60, 120 capped at 100, 240 capped


def test_the_same_crash_twice_with_the_same_image_is_not_retried(
    running: Runner, settings: Any
) -> None:
    request = running(minutes_ago=5, kind="notebook")
    assert execution.apply_workload_status(request, crash(request, 137, "OOMKilled")) == "queued"
    request = run_again(request)
    assert execution.apply_workload_status(request, crash(request, 137, "OOMKilled")) == "failed"
    request.refresh_from_db()
    assert request.status == RequestStatus.FAILED
    assert request.status_reason == (
        f"Failed — OOMKilled (exit code 137) twice with image {request.image}; not retried."
    )
    assert request.attempt == 2  # the tier's max_attempts (3) was not what stopped it
    event = AuditEvent.objects.filter(action="reclaim.crash_loop", target_id=str(request.pk))
    assert event.latest("pk").data["repeated"] is True
    assert Allocation.objects.active().filter(request=request).count() == 0


def test_an_image_pull_error_fails_the_request_only_after_its_grace(
    org: Org, fleet: Fleet, settings: Any
) -> None:
    settings.IMAGE_PULL_GRACE_SECONDS = 300
    request = launching(org, fleet)
    message = "cannot pull image registry.example.com/x:1: manifest unknown"
    pulling = status_of(request, "pending", "ErrImagePull", message=message)
    assert execution.apply_workload_status(request, pulling) is None
    request.refresh_from_db()
    assert request.status == RequestStatus.LAUNCHING
    allocation = Allocation.objects.get(request=request)
    since = allocation.image_pull_failing_since
    assert since is not None
    fails_at = since + timedelta(seconds=300)
    assert request.blocker["message"] == (
        "Cannot pull image registry.example.com/x:1: manifest unknown; "
        f"the request fails at {fails_at:%H:%M} UTC unless the pull succeeds."
    )
    assert request.status_reason == request.blocker["message"]
    # The kubelet backs off: a later sight of the error does not move the first.
    backoff = status_of(request, "pending", "ImagePullBackOff", message=message)
    assert execution.apply_workload_status(request, backoff) is None
    assert Allocation.objects.get(request=request).image_pull_failing_since == since
    # Past the grace it fails, naming the image and why.
    Allocation.objects.filter(pk=allocation.pk).update(
        image_pull_failing_since=since - timedelta(seconds=301)
    )
    assert execution.apply_workload_status(request, backoff) == RequestStatus.FAILED
    request.refresh_from_db()
    assert request.status_reason == (
        f"Failed — ImagePullBackOff: {message} (the pull did not succeed within 300 s)."
    )
    assert Allocation.objects.get(request=request).end_reason == "image_pull"


def test_a_pull_that_goes_through_starts_the_grace_afresh_next_time(org: Org, fleet: Fleet) -> None:
    request = launching(org, fleet)
    message = "cannot pull image registry.example.com/x:1: i/o timeout"
    execution.apply_workload_status(
        request, status_of(request, "pending", "ErrImagePull", message=message)
    )
    assert Allocation.objects.get(request=request).image_pull_failing_since is not None
    execution.apply_workload_status(request, status_of(request, "pending", "ContainerCreating"))
    assert Allocation.objects.get(request=request).image_pull_failing_since is None
    request.refresh_from_db()
    assert request.status == RequestStatus.LAUNCHING


def test_a_job_that_starts_running_gets_its_deadline_counted_from_then(
    org: Org, fleet: Fleet, django_capture_on_commit_callbacks: Any
) -> None:
    request = launching(org, fleet)
    started = timezone.now() - timedelta(seconds=30)
    created = started - timedelta(minutes=20)  # it waited 20 minutes for a node
    SimulatedWorkload.objects.filter(request_key=str(request.pk)).update(
        kind="job",
        created_at=created,
        starts_at=started,
        ends_at=started + timedelta(hours=1),
        deadline_at=created + timedelta(seconds=request.max_runtime_seconds),
    )
    with django_capture_on_commit_callbacks(execute=True):
        running = status_of(request, "running", started_at=started)
        assert execution.apply_workload_status(request, running) == RequestStatus.RUNNING
    workload = SimulatedWorkload.objects.get(request_key=str(request.pk))
    assert workload.deadline_at == started + timedelta(seconds=request.max_runtime_seconds)


# Waiting reasons ----------------------------------------------------------------------------


def test_the_clusters_waiting_reason_reaches_the_request_and_clears_once_it_runs(
    org: Org, fleet: Fleet
) -> None:
    request = launching(org, fleet)
    assert request.status_reason == "Creating the workload."
    message = "0/5 nodes are available: 5 Insufficient nvidia.com/gpu."
    execution.apply_workload_status(
        request, status_of(request, "pending", "Unschedulable", message=message)
    )
    request.refresh_from_db()
    assert request.waiting_reason == f"Unschedulable: {message}"
    assert request.status_reason == "The cluster's scheduler cannot place it yet."
    assert request.status == RequestStatus.LAUNCHING

    refusal = 'Error creating: pods "x" is forbidden: exceeded quota: gpu-portal-quota'
    execution.apply_workload_status(
        request, status_of(request, "pending", "FailedCreate", message=refusal)
    )
    request.refresh_from_db()
    assert request.status_reason == "The namespace's ResourceQuota refuses its pod."
    assert "exceeded quota" in request.waiting_reason
    client = Client()
    client.force_login(org.dev_a)
    page = client.get(reverse("gpu-request-page", args=[request.pk])).content.decode()
    assert (
        "The namespace&#x27;s ResourceQuota refuses its pod." in page and "exceeded quota" in page
    )

    execution.apply_workload_status(request, status_of(request, "pending", "ContainerCreating"))
    request.refresh_from_db()
    assert (request.waiting_reason, request.status_reason) == ("", "The cluster is starting it.")
    execution.apply_workload_status(
        request, status_of(request, "pending", "Unschedulable", message=message)
    )
    assert execution.apply_workload_status(request, status_of(request, "running")) == "running"
    request.refresh_from_db()
    assert (request.waiting_reason, request.status_reason) == ("", "Running.")


# Quota pushes -------------------------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.projects: list[ProjectSpec] = []
        self.priority_classes: list[str] = []

    def ensure_priority_classes(self, specs: Sequence[PrioritySpec]) -> None:
        self.priority_classes += [spec.name for spec in specs]

    def ensure_project(self, spec: ProjectSpec) -> None:
        self.projects.append(spec)


def test_a_quota_change_pushes_every_gpu_resource_to_the_namespace(
    org: Org, fleet: Fleet, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    recorder = Recorder()
    monkeypatch.setattr(execution, "cluster_backend", lambda: recorder)
    with django_capture_on_commit_callbacks(execute=True):
        quota = set_quota(
            actor=org.lead_a,
            team=org.team_a,
            project=org.project_a,
            flavor=fleet.l4_12g,
            guaranteed=2,
            limit=4,
        )
    (spec,) = recorder.projects
    assert spec.namespace == org.project_a.namespace
    # A100 16; L4 12G 4 (the project's split) + L4 6G 16 (the team's): 0.5 x 4 + 0.25 x 16 = 6
    # GPU-equivalents of 24 GiB cards; MIG 1g 14 and 3g 4.
    assert spec.quota == {
        "requests.nvidia.com/gpu": 16 + 4 + 16,
        "requests.nvidia.com/gpumem": 6 * 24576,
        "requests.nvidia.com/gpucores": 600,
        "requests.nvidia.com/mig-1g.10gb": 14,
        "requests.nvidia.com/mig-3g.40gb": 4,
    }
    with django_capture_on_commit_callbacks(execute=True):
        delete_quota(actor=org.lead_a, quota=quota)
    assert recorder.projects[-1].quota["requests.nvidia.com/gpu"] == 16 + 16 + 16


def test_a_team_quota_change_pushes_every_project_of_the_team(
    org: Org, fleet: Fleet, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    recorder = Recorder()
    monkeypatch.setattr(execution, "cluster_backend", lambda: recorder)
    with django_capture_on_commit_callbacks(execute=True):
        set_quota(actor=org.admin, team=org.team_a, flavor=fleet.a100, guaranteed=4, limit=10)
    pushed = {spec.namespace for spec in recorder.projects}
    assert pushed == {p.namespace for p in org.team_a.projects.all()}
    assert all(int(spec.quota["requests.nvidia.com/gpu"]) >= 10 for spec in recorder.projects)


# Access consistency and foreign pods --------------------------------------------------------


def reported(node: Node, allocatable: dict[str, str], **fields: Any) -> NodeInventory:
    devices = node.devices.count()
    mig = {
        name.removeprefix("nvidia.com/mig-"): int(amount)
        for name, amount in allocatable.items()
        if name.startswith("nvidia.com/mig-")
    }
    return NodeInventory(
        name=node.name,
        labels=node.labels,
        taints=(),
        ready=True,
        schedulable=True,
        allocatable=allocatable,
        capacity=allocatable,
        gpu_model=node.gpu_model,
        gpu_count=devices,
        gpu_memory_mib=node.devices.first().memory_mib,  # type: ignore[union-attr]
        mig_devices=mig,
        **fields,
    )


def fleet_inventory(**changes: dict[str, Any]) -> list[NodeInventory]:
    """Every demo node advertising its mode's resources, with `changes` by node name."""
    shapes = {
        "a100-training": {"nvidia.com/gpu": "8"},
        "h100-mig": {"nvidia.com/mig-1g.10gb": "28", "nvidia.com/mig-3g.40gb": "8"},
        "l4-vgpu": {
            "nvidia.com/gpu": "40",
            "nvidia.com/gpumem": "98304",
            "nvidia.com/gpucores": "400",
        },
    }
    out = []
    for node in Node.objects.select_related("pool").order_by("name"):
        inventory = reported(node, shapes[node.pool.slug])
        out.append(replace(inventory, **changes.get(node.name, {})))
    return out


def test_a_node_without_its_modes_resources_is_held_back_until_it_has_them(
    org: Org, fleet: Fleet
) -> None:
    bare = {"allocatable": {"nvidia.com/gpu": "4"}}
    counts = apply_inventory(fleet_inventory(**{"l4-vgpu-1": bare}))
    assert counts["held_back"] == 1
    node = Node.objects.get(name="l4-vgpu-1")
    assert "no nvidia.com/gpumem or nvidia.com/gpucores" in node.held_back_reason
    assert node.is_schedulable  # up: its running work stays, it only takes nothing new
    engine_nodes = {n.id: n.schedulable for n in build_snapshot().nodes}
    assert engine_nodes == {name: name != "l4-vgpu-1" for name in engine_nodes}
    client = Client()
    client.force_login(org.admin)
    page = client.get(reverse("fleet-page")).content.decode()
    assert "l4-vgpu-1" in page and "no nvidia.com/gpumem or nvidia.com/gpucores" in page
    assert apply_inventory(fleet_inventory())["held_back"] == 0
    assert Node.objects.get(name="l4-vgpu-1").held_back_reason == ""


def free_3g(devices: Any) -> int:
    return sum(d.mig_free.get("3g.40gb", 0) for d in devices if d.node_id == "h100-mig-1")


def test_gpus_held_by_pods_the_portal_did_not_create_are_not_free(org: Org, fleet: Fleet) -> None:
    apply_inventory(fleet_inventory())
    free_3g_before = free_3g(build_snapshot().devices)
    assert free_3g_before >= 2
    apply_inventory(
        fleet_inventory(
            **{
                "a100-training-1": {"foreign_usage": {"nvidia.com/gpu": 3}},
                "h100-mig-1": {"foreign_usage": {"nvidia.com/mig-3g.40gb": 2}},
                "l4-vgpu-2": {
                    "foreign_usage": {"nvidia.com/gpumem": 30000, "nvidia.com/gpucores": 150}
                },
            }
        )
    )
    assert Node.objects.get(name="a100-training-1").foreign_usage == {"nvidia.com/gpu": 3}
    devices = build_snapshot().devices
    taken = [d.index for d in devices if d.node_id == "a100-training-1" and d.whole_allocated]
    assert taken == [5, 6, 7]
    assert not any(d.whole_allocated for d in devices if d.node_id == "a100-training-2")
    l4 = {d.index: d for d in devices if d.node_id == "l4-vgpu-2"}
    assert (l4[3].memory_free_mib, l4[3].cores_free_percent) == (0, 0)
    assert (l4[2].memory_free_mib, l4[2].cores_free_percent) == (24576 * 2 - 30000, 50)
    assert l4[1].memory_free_mib == 24576
    assert free_3g(devices) == free_3g_before - 2
