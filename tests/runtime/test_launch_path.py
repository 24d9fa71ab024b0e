"""The launch path's own cost: what a launch, a sweep, a burst of approvals and a sync queue or
ask of the cluster, so a steady stream of requests costs about one task and one create each."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.core.cache import cache
from django.db.models.signals import post_init
from django.utils import timezone

from runtime import tasks as runtime_tasks
from runtime.cluster.base import (
    PermanentClusterError,
    ProjectSpec,
    WorkloadEvent,
    WorkloadSpec,
    WorkloadStatus,
)
from runtime.cluster.simulated import SimulatedCluster
from runtime.models import SimulatedWorkload
from runtime.services import execution
from scheduling import dispatch
from scheduling import tasks as scheduling_tasks
from scheduling.choices import RequestStatus
from scheduling.models import GpuRequest
from scheduling.services import cycle
from scheduling.services.quotas import set_quota
from scheduling.services.requests import approve_gpu_request
from tests.scheduling.conftest import Fleet
from tests.support.factories import GpuRequestFactory
from tests.support.personas import Org

pytestmark = pytest.mark.django_db


class CountingCluster(SimulatedCluster):
    """The simulated cluster, counting the calls the launch path and the sync make."""

    def __init__(self, *, speed: float = 100_000) -> None:
        super().__init__(speed=speed)
        self.calls: list[str] = []
        self.missing_namespaces: set[str] = set()

    def ensure_priority_classes(self, specs: Any) -> None:
        self.calls.append("ensure_priority_classes")

    def ensure_project(self, spec: ProjectSpec) -> None:
        self.calls.append("ensure_project")
        self.missing_namespaces.discard(spec.namespace)

    def launch(self, spec: WorkloadSpec) -> str:
        self.calls.append("launch")
        if spec.namespace in self.missing_namespaces:
            raise PermanentClusterError("namespace not found", status=404, reason="NotFound")
        return super().launch(spec)

    def get_workload(self, namespace: str, request_id: str, attempt: int) -> WorkloadStatus:
        self.calls.append("get_workload")
        return super().get_workload(namespace, request_id, attempt)

    def list_workloads(
        self, namespaces: Any = None, *, request_ids: Any = None
    ) -> list[WorkloadStatus]:
        self.calls.append(
            "list_workloads" if request_ids is None else f"list_workloads({sorted(request_ids)})"
        )
        return super().list_workloads(namespaces, request_ids=request_ids)


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple[Any, ...]]]:
    """Tasks queued by name (nothing runs them)."""
    queued: list[tuple[str, tuple[Any, ...]]] = []

    def send(task_name: str, *args: Any) -> bool:
        queued.append((task_name, args))
        return True

    monkeypatch.setattr(dispatch, "send", send)
    return queued


def admitted_requests(org: Org, fleet: Fleet, count: int) -> list[GpuRequest]:
    requests = [
        GpuRequestFactory.create(project=org.project_a, flavor=fleet.l4_6g) for _ in range(count)
    ]
    cycle.run_cycle()
    return [GpuRequest.objects.get(pk=r.pk) for r in requests]


# 1. A launch ensures the project once per spec -------------------------------------------------


def test_a_second_launch_in_a_project_makes_only_the_workload_call(org: Org, fleet: Fleet) -> None:
    first, second = admitted_requests(org, fleet, 2)
    backend = CountingCluster()
    execution.launch_request(request_id=first.pk, attempt=1, backend=backend)
    assert backend.calls == ["ensure_priority_classes", "ensure_project", "launch"]
    backend.calls.clear()
    execution.launch_request(request_id=second.pk, attempt=1, backend=backend)
    assert backend.calls == ["launch"]


def test_a_steady_state_launch_reads_and_writes_the_database_in_eight_statements(
    org: Org, fleet: Fleet, django_assert_num_queries: Any
) -> None:
    first, second = admitted_requests(org, fleet, 2)
    backend = CountingCluster()
    execution.launch_request(request_id=first.pk, attempt=1, backend=backend)
    backend.launch = lambda spec: spec.name  # type: ignore[method-assign]  # no simulated rows
    # The allocation with its request, pool and tier (one join); the project's quotas and its
    # pools' largest cards (the namespace spec, compared with what was ensured); its workspace
    # and secrets (read once for the claims and the pod); the transition to launching and its
    # audit event; the workload's name on the allocation.
    with django_assert_num_queries(8):
        execution.launch_request(request_id=second.pk, attempt=1, backend=backend)
    assert GpuRequest.objects.get(pk=second.pk).status == RequestStatus.LAUNCHING


def test_a_changed_quota_or_a_vanished_namespace_is_ensured_again(org: Org, fleet: Fleet) -> None:
    first, second, third = admitted_requests(org, fleet, 3)
    backend = CountingCluster()
    execution.launch_request(request_id=first.pk, attempt=1, backend=backend)
    set_quota(actor=org.admin, team=org.team_a, flavor=fleet.l4_6g, guaranteed=4, limit=20)
    backend.calls.clear()
    execution.launch_request(request_id=second.pk, attempt=1, backend=backend)
    assert backend.calls == ["ensure_project", "launch"]
    # Someone deleted the namespace: the create answers 404, the launch ensures and retries.
    backend.missing_namespaces.add(org.project_a.namespace)
    backend.calls.clear()
    execution.launch_request(request_id=third.pk, attempt=1, backend=backend)
    assert backend.calls == [
        "launch",
        "ensure_priority_classes",
        "ensure_project",
        "launch",
    ]


# 2. The sweeper re-queues only what is really stuck --------------------------------------------


def _make_stuck(request: GpuRequest) -> None:
    GpuRequest.objects.filter(pk=request.pk).update(
        updated_at=request.updated_at.replace(year=2020)
    )


def test_the_sweeper_leaves_a_launch_that_waits_in_the_queue(
    org: Org,
    fleet: Fleet,
    sent: list[tuple[str, tuple[Any, ...]]],
    django_capture_on_commit_callbacks: Any,
) -> None:
    (request,) = admitted_requests(org, fleet, 1)
    dispatch.send_launch(request.pk, 1)  # queued a second ago, no worker has taken it yet
    _make_stuck(request)  # admitted long ago
    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        assert runtime_tasks.sweep_stuck_requests() == 0
    assert sent == []


def test_the_sweeper_requeues_a_lost_launch_once(
    org: Org,
    fleet: Fleet,
    sent: list[tuple[str, tuple[Any, ...]]],
    django_capture_on_commit_callbacks: Any,
) -> None:
    (request,) = admitted_requests(org, fleet, 1)
    dispatch.send_launch(request.pk, 1)
    cache.delete(dispatch.launch_queued_key(request.pk, 1))  # the mark expired: message lost
    _make_stuck(request)
    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        assert runtime_tasks.sweep_stuck_requests() == 1
    assert sent == [(dispatch.LAUNCH_WORKLOAD, (request.pk, 1))]
    _make_stuck(request)
    with django_capture_on_commit_callbacks(execute=True):
        assert runtime_tasks.sweep_stuck_requests() == 0  # re-queued a moment ago: waits again
    assert len(sent) == 1


def test_the_sweeper_leaves_a_launch_behind_a_long_queue_that_moves(
    org: Org,
    fleet: Fleet,
    sent: list[tuple[str, tuple[Any, ...]]],
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    earlier, waiting = admitted_requests(org, fleet, 2)
    # Both queued ten minutes ago; the one queued first has just started.
    for request in (earlier, waiting):
        dispatch.send_launch(request.pk, 1)
        cache.set(dispatch.launch_queued_key(request.pk, 1), time.time() - 600, 900)
    monkeypatch.setattr(execution, "launch_request", lambda **kwargs: "launched")
    runtime_tasks.launch_workload.run(earlier.pk, 1)
    _make_stuck(waiting)
    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        assert runtime_tasks.sweep_stuck_requests() == 0
    assert sent == []


def test_the_sweeper_requeues_a_launch_the_queue_has_passed(
    org: Org,
    fleet: Fleet,
    sent: list[tuple[str, tuple[Any, ...]]],
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    first, second = admitted_requests(org, fleet, 2)
    # Queued ten minutes ago and taken by a worker that was killed before it started it ...
    dispatch.send_launch(first.pk, 1)
    cache.set(dispatch.launch_queued_key(first.pk, 1), time.time() - 600, 900)
    # ... while a launch queued after it has started since.
    dispatch.send_launch(second.pk, 1)
    monkeypatch.setattr(execution, "launch_request", lambda **kwargs: "launched")
    runtime_tasks.launch_workload.run(second.pk, 1)
    _make_stuck(first)
    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        assert runtime_tasks.sweep_stuck_requests() == 1
    assert sent == [(dispatch.LAUNCH_WORKLOAD, (first.pk, 1))]


def test_the_sweeper_leaves_a_finished_launch_to_the_status_sync(
    org: Org,
    fleet: Fleet,
    sent: list[tuple[str, tuple[Any, ...]]],
    django_capture_on_commit_callbacks: Any,
) -> None:
    launched, interrupted = admitted_requests(org, fleet, 2)
    execution.launch_request(request_id=launched.pk, attempt=1, backend=CountingCluster(speed=1))
    # A worker died after the move to `launching`, before the workload was created.
    GpuRequest.objects.filter(pk=interrupted.pk).update(status=RequestStatus.LAUNCHING)
    # Both moved to `launching` five minutes ago: past STUCK_TRANSITION_SECONDS, not the patience.
    GpuRequest.objects.filter(pk__in=[launched.pk, interrupted.pk]).update(
        updated_at=timezone.now() - timedelta(minutes=5)
    )
    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        assert runtime_tasks.sweep_stuck_requests() == 1
    assert sent == [(dispatch.LAUNCH_WORKLOAD, (interrupted.pk, 1))]


def test_a_started_launch_is_watched_by_the_sweeper_again(
    org: Org, fleet: Fleet, sent: list[tuple[str, tuple[Any, ...]]], monkeypatch: Any
) -> None:
    (request,) = admitted_requests(org, fleet, 1)
    dispatch.send_launch(request.pk, 1)
    monkeypatch.setattr(execution, "launch_request", lambda **kwargs: "killed mid-launch")
    runtime_tasks.launch_workload.run(request.pk, 1)
    assert dispatch.queued_launches([(request.pk, 1)]) == set()


# 3. One scheduling cycle per burst of approvals ------------------------------------------------


def _cycles(sent: list[tuple[str, tuple[Any, ...]]]) -> int:
    return sum(1 for name, _ in sent if name == dispatch.RUN_SCHEDULING_CYCLE)


def test_a_burst_of_approvals_queues_one_cycle(
    org: Org,
    fleet: Fleet,
    sent: list[tuple[str, tuple[Any, ...]]],
    django_capture_on_commit_callbacks: Any,
) -> None:
    requests = [
        GpuRequestFactory.create(project=org.project_a, flavor=fleet.a100) for _ in range(6)
    ]
    assert {r.status for r in requests} == {RequestStatus.PENDING_APPROVAL}
    for request in requests:
        with django_capture_on_commit_callbacks(execute=True):
            approve_gpu_request(actor=org.lead_a, request=request)
    assert _cycles(sent) == 1
    # The cycle takes the mark as it starts: the next approval asks for a cycle of its own.
    scheduling_tasks.run_scheduling_cycle()
    assert _cycles(sent) == 1
    late = GpuRequestFactory.create(project=org.project_a, flavor=fleet.a100)
    with django_capture_on_commit_callbacks(execute=True):
        approve_gpu_request(actor=org.lead_a, request=late)
    assert _cycles(sent) == 2


def test_a_cycle_asked_for_while_one_runs_follows_it(
    org: Org, fleet: Fleet, sent: list[tuple[str, tuple[Any, ...]]], monkeypatch: Any
) -> None:
    build_snapshot: Callable[..., Any] = cycle.build_snapshot
    nested: list[bool] = []

    def read_while_an_approval_lands(**kwargs: Any) -> Any:
        snapshot = build_snapshot(**kwargs)
        if not nested:
            # An approval commits after this cycle read; its cycle starts while this one runs,
            # finds the lease held and exits.
            dispatch.send_scheduling_cycle()
            nested.append(scheduling_tasks.run_scheduling_cycle()["ran"])
        return snapshot

    monkeypatch.setattr(cycle, "build_snapshot", read_while_an_approval_lands)
    assert scheduling_tasks.run_scheduling_cycle()["ran"] is True
    assert nested == [False]
    # One cycle for the approval, and one more queued by the cycle that held the lease.
    assert _cycles(sent) == 2
    assert dispatch.is_cycle_pending()


def test_without_the_cache_every_ask_queues_a_cycle(
    sent: list[tuple[str, tuple[Any, ...]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    def down(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("cache down")

    monkeypatch.setattr(cache, "add", down)
    dispatch.send_scheduling_cycle()
    dispatch.send_scheduling_cycle()
    assert _cycles(sent) == 2


# 4. The sync lists each namespace once ----------------------------------------------------------


def test_sync_lists_the_live_namespaces_instead_of_reading_each_request(
    org: Org, fleet: Fleet
) -> None:
    requests = admitted_requests(org, fleet, 5)
    backend = CountingCluster()
    for request in requests:
        execution.launch_request(request_id=request.pk, attempt=1, backend=backend)
    backend.calls.clear()
    moved = execution.sync_workloads(backend=backend)
    assert backend.calls == ["list_workloads"]
    assert sum(moved.values()) == 5
    assert not GpuRequest.objects.filter(status=RequestStatus.LAUNCHING).exists()


def test_sync_reads_a_workload_the_listing_lacks(org: Org, fleet: Fleet) -> None:
    (request,) = admitted_requests(org, fleet, 1)
    GpuRequest.objects.filter(pk=request.pk).update(status=RequestStatus.RUNNING)
    backend = CountingCluster()
    execution.sync_workloads(backend=backend)
    assert backend.calls == ["list_workloads", "get_workload"]
    request.refresh_from_db()
    assert request.status == RequestStatus.FAILED  # the workload disappeared


class WatchingCluster(CountingCluster):
    """Counting, and a watch that reports the changes a test queues (`resync` when asked)."""

    def __init__(self) -> None:
        super().__init__(speed=1)  # pods start after 5-20 s: the requests stay live
        self.events: list[WorkloadEvent] = []
        self.version = 100

    def watch_workloads(
        self, resource_version: str | None = None, *, timeout_seconds: int = 300
    ) -> Iterator[WorkloadEvent]:
        self.calls.append(f"watch_workloads({resource_version})")
        if resource_version is None:
            yield WorkloadEvent(type="resync", resource_version=str(self.version))
            return
        events, self.events = self.events, []
        yield from events

    def change(self, request: GpuRequest) -> None:
        self.version += 1
        self.events.append(
            WorkloadEvent(
                type="changed",
                resource_version=str(self.version),
                namespace=request.project.namespace,
                request_id=str(request.pk),
                attempt=request.attempt,
            )
        )


def test_the_periodic_sync_reads_only_what_the_watch_saw_change(
    org: Org, fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    requests = admitted_requests(org, fleet, 3)
    backend = WatchingCluster()
    for request in requests:
        execution.launch_request(request_id=request.pk, attempt=1, backend=backend)
    backend.calls.clear()
    # The first pass lists everything, from the version it took first.
    execution.sync_watched_workloads(backend=backend)
    assert backend.calls == ["watch_workloads(None)", "list_workloads"]
    # The next one reads only the workload whose pods changed since.
    backend.calls.clear()
    backend.change(GpuRequest.objects.select_related("project").get(pk=requests[1].pk))
    execution.sync_watched_workloads(backend=backend)
    assert backend.calls == ["watch_workloads(100)", "get_workload"]
    backend.calls.clear()
    execution.sync_watched_workloads(backend=backend)
    assert backend.calls == ["watch_workloads(101)"]  # nothing changed, nothing read
    # An expired version, and a full pass once FULL_SYNC_SECONDS have passed.
    backend.calls.clear()
    backend.events.append(WorkloadEvent(type="resync", resource_version="200"))
    execution.sync_watched_workloads(backend=backend)
    assert backend.calls == ["watch_workloads(101)", "watch_workloads(None)", "list_workloads"]
    backend.calls.clear()
    monkeypatch.setattr(execution, "FULL_SYNC_SECONDS", 0.0)
    execution.sync_watched_workloads(backend=backend)
    assert backend.calls == ["watch_workloads(None)", "list_workloads"]


def test_the_periodic_sync_lists_several_changed_workloads_together(org: Org, fleet: Fleet) -> None:
    requests = admitted_requests(org, fleet, 3)
    backend = WatchingCluster()
    for request in requests:
        execution.launch_request(request_id=request.pk, attempt=1, backend=backend)
    execution.sync_watched_workloads(backend=backend)  # the first, full pass
    backend.calls.clear()
    for request in requests[:2]:
        backend.change(GpuRequest.objects.select_related("project").get(pk=request.pk))
    # Every pod runs now; the watch reported only the first two.
    SimulatedWorkload.objects.update(
        starts_at=timezone.now() - timedelta(seconds=1),
        ends_at=timezone.now() + timedelta(hours=1),
    )
    moved = execution.sync_watched_workloads(backend=backend)
    # One list selected by the two changed requests' ids, not a read of each.
    changed = sorted(str(r.pk) for r in requests[:2])
    assert backend.calls == ["watch_workloads(100)", f"list_workloads({changed})"]
    assert moved == {RequestStatus.RUNNING: 2}
    assert list(
        GpuRequest.objects.filter(pk__in=[r.pk for r in requests])
        .order_by("pk")
        .values_list("status", flat=True)
    ) == [RequestStatus.RUNNING, RequestStatus.RUNNING, RequestStatus.LAUNCHING]


def test_a_watched_pass_reads_only_the_requests_whose_pods_changed(
    org: Org, fleet: Fleet, django_assert_num_queries: Any
) -> None:
    requests = admitted_requests(org, fleet, 6)
    backend = WatchingCluster()
    for request in requests:
        execution.launch_request(request_id=request.pk, attempt=1, backend=backend)
    execution.sync_watched_workloads(backend=backend)  # the first, full pass
    changed = GpuRequest.objects.select_related("project").get(pk=requests[2].pk)
    backend.change(changed)
    SimulatedWorkload.objects.update(
        starts_at=timezone.now() - timedelta(seconds=1),
        ends_at=timezone.now() + timedelta(hours=1),
    )
    loaded: list[int] = []

    def count(sender: Any, instance: GpuRequest, **kwargs: Any) -> None:
        loaded.append(instance.pk)

    post_init.connect(count, sender=GpuRequest)
    try:
        # The changed request with its project, team and owner (one join); its workload; its
        # allocation's pods and claims; the move to running (a savepoint here, the transaction
        # in the follower) with its audit event, the owner's notice and the start time.
        with django_assert_num_queries(11):
            moved = execution.sync_watched_workloads(backend=backend)
    finally:
        post_init.disconnect(count, sender=GpuRequest)
    assert moved == {RequestStatus.RUNNING: 1}
    assert loaded == [changed.pk]  # not the five live requests the watch did not report
    assert GpuRequest.objects.get(pk=changed.pk).status == RequestStatus.RUNNING
