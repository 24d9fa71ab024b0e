"""A request's life on the real control plane when its workload does not simply run:

- a container that cannot pull its image keeps the request launching, its blocker naming the
  image, until IMAGE_PULL_GRACE_SECONDS after sync first saw it, and then fails it;
- a Job whose pod waited for a node keeps its whole max runtime from when the pod runs: the
  portal patches the Job's `activeDeadlineSeconds`, which the Job controller counts from the
  Job's start, and the real controller stops it only then;
- a crash-looping notebook goes back to the queue with a backoff the cycle respects, and the
  same image crashing the same way again fails it with the reason on the request.

kwok fakes what a kubelet reports (scripts/testbed/kwok-stages.yaml): the `pod-image-pull-failed`
and `pod-crash-loop` stages, and the `pod-ready` delay for a pod that starts late. Each test
brings its own node and pool.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from django.contrib.auth import get_user_model

from runtime.services import execution
from runtime.services.inventory import apply_inventory
from scheduling.choices import RequestStatus
from scheduling.demo import seed_demo_fleet
from scheduling.models import Allocation, GpuRequest
from scripts.testbed.cluster import whole_card_node
from tenants.models import AuditEvent, Project
from tenants.services.organisation import seed_demo_organisation
from tests.k8s.conftest import Admin, eventually
from tests.k8s.helpers import runs_for
from tests.k8s.test_runtime_fidelity import admit, own_pool, submit
from tests.support.personas import api_client

pytestmark = [pytest.mark.k8s, pytest.mark.django_db]
PULL_NODE = "lc-pull-1"
DEADLINE_NODE = "lc-deadline-1"
CRASH_NODE = "lc-crash-1"
PULL_FAILED = "pod-image-pull-failed.stage.kwok.x-k8s.io"
CRASH_LOOP = "pod-crash-loop.stage.kwok.x-k8s.io"
READY_DELAY = "pod-ready.stage.kwok.x-k8s.io/delay"
READY_JITTER = "pod-ready.stage.kwok.x-k8s.io/jitter-delay"


@pytest.fixture(scope="module")
def lifecycle_nodes(k8s_testbed: Any, k8s_admin: Admin) -> Iterator[None]:
    nodes = (PULL_NODE, DEADLINE_NODE, CRASH_NODE)
    k8s_testbed.add_nodes([whole_card_node(name, pool=name, gpus=1) for name in nodes])
    yield
    for name in nodes:
        with contextlib.suppress(Exception):
            k8s_admin.core.delete_node(name, _preload_content=False)


@pytest.fixture
def portal(
    k8s_backend: Any,
    k8s_admin: Admin,
    portal_priorities: None,
    lifecycle_nodes: None,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[dict[str, Any]]:
    """The demo organisation and fleet, a project of its own, and the worker's tasks (run
    inline) talking to the test bed."""
    monkeypatch.setattr(execution, "cluster_backend", lambda: k8s_backend)
    teams = seed_demo_organisation(password="x")
    seed_demo_fleet(teams=teams)
    project = Project.objects.create(
        team=teams["vision"], slug=f"k{uuid.uuid4().hex[:8]}", name="Test bed"
    )
    users = get_user_model().objects
    yield {
        "teams": teams,
        "project": project,
        "dev": users.get(username="alice"),
        "lead": users.get(username="bob"),
    }
    with contextlib.suppress(Exception):
        k8s_admin.core.delete_namespace(project.namespace, _preload_content=False)


def launch_with(
    request: GpuRequest,
    backend: Any,
    monkeypatch: pytest.MonkeyPatch,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> str:
    """`launch_request` of the request's current attempt, its pods carrying kwok's knobs."""
    spec_of = execution.workload_spec
    monkeypatch.setattr(
        execution,
        "workload_spec",
        lambda *args: replace(
            spec_of(*args),
            extra_labels=labels or {},
            extra_annotations={**runs_for("1h"), **(annotations or {})},
        ),
    )
    request.refresh_from_db()
    return execution.launch_request(request_id=request.pk, attempt=request.attempt, backend=backend)


def sync(request: GpuRequest, backend: Any, capture: Any) -> GpuRequest:
    """One sync pass, the tasks it queues (terminations, deadlines) run after commit."""
    with capture(execute=True):
        execution.sync_workloads(backend=backend)
    request.refresh_from_db()
    return request


def sync_until(
    request: GpuRequest, backend: Any, capture: Any, check: Any, *, timeout: float, what: str
) -> GpuRequest:
    return eventually(
        lambda: check(sync(request, backend, capture)) and request,
        timeout=timeout,
        what=what,
    )


def test_an_image_that_cannot_be_pulled_fails_the_request_only_after_the_grace(
    k8s_backend: Any,
    portal: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    settings: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    settings.IMAGE_PULL_GRACE_SECONDS = 8
    capture = django_capture_on_commit_callbacks
    flavor = own_pool(portal, PULL_NODE)
    apply_inventory(k8s_backend.sync_inventory())
    request = submit(portal, flavor, image="registry.example.com/ml/missing:7")
    assert admit(capture) == [(request.pk, 1)]
    launch_with(request, k8s_backend, monkeypatch, labels={PULL_FAILED: "true"})

    sync_until(
        request,
        k8s_backend,
        capture,
        lambda r: r.waiting_reason.startswith("ErrImagePull"),
        timeout=30,
        what="the pull error on the request",
    )
    seen = time.monotonic()
    assert request.status == RequestStatus.LAUNCHING
    message = request.blocker["message"]
    assert message.startswith(
        "Cannot pull image registry.example.com/ml/missing:7: failed to pull and unpack image "
        '"registry.example.com/ml/missing:7": not found; the request fails at '
    )
    assert message.endswith(" UTC unless the pull succeeds.")
    assert (
        api_client(portal["dev"])
        .get(f"/api/v1/requests/{request.pk}/")
        .json()["blocker"]["message"]
        == message
    )

    # Within the grace it keeps waiting, however often sync looks.
    while time.monotonic() - seen < 4:
        assert sync(request, k8s_backend, capture).status == RequestStatus.LAUNCHING
        time.sleep(0.5)
    # Past it, the request fails with the image and the kubelet's words.
    sync_until(
        request,
        k8s_backend,
        capture,
        lambda r: r.status != RequestStatus.LAUNCHING,
        timeout=30,
        what="the request failed after the grace",
    )
    assert time.monotonic() - seen >= 4
    assert request.status == RequestStatus.FAILED
    assert request.status_reason.startswith(
        "Failed — ErrImagePull: cannot pull image registry.example.com/ml/missing:7: "
    )
    assert request.status_reason.endswith("(the pull did not succeed within 8 s).")
    allocation = Allocation.objects.get(request=request)
    assert allocation.end_reason == "image_pull"
    assert allocation.image_pull_failing_since is not None
    assert request.finished_at is not None
    assert (request.finished_at - allocation.image_pull_failing_since).total_seconds() >= 8


def test_a_job_that_waited_for_its_pod_keeps_its_whole_runtime_once_it_runs(
    k8s_backend: Any,
    k8s_admin: Admin,
    portal: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    capture = django_capture_on_commit_callbacks
    flavor = own_pool(portal, DEADLINE_NODE)
    apply_inventory(k8s_backend.sync_inventory())
    namespace = portal["project"].namespace
    request = submit(portal, flavor, max_runtime_seconds=15)
    assert admit(capture) == [(request.pk, 1)]
    # kwok holds the pod 20 s before it runs: longer than the whole max runtime.
    name = launch_with(
        request,
        k8s_backend,
        monkeypatch,
        annotations={READY_DELAY: "20s", READY_JITTER: "20s"},
    )
    job = k8s_admin.batch.read_namespaced_job(name, namespace)
    # Room to wait for a node: the tier's pending timeout on top of the max runtime.
    allowance = execution.start_allowance_seconds(flavor.pool)
    assert allowance > 0
    assert job.spec.active_deadline_seconds == 15 + allowance

    sync_until(
        request,
        k8s_backend,
        capture,
        lambda r: r.status != RequestStatus.LAUNCHING,
        timeout=45,
        what="the request running",
    )
    assert request.status == RequestStatus.RUNNING
    job = k8s_admin.batch.read_namespaced_job(name, namespace)
    started = Allocation.objects.get(request=request).started_at
    assert started is not None
    waited = (started - job.status.start_time).total_seconds()
    assert waited >= 19
    # The deadline is now the wait plus the whole max runtime, from the Job's start.
    assert job.spec.active_deadline_seconds >= waited + 15
    assert job.spec.active_deadline_seconds <= waited + 15 + 1

    # 30 s after the Job started (its pod ran 10 s of its 15): still running.
    time.sleep(max(0.0, job.status.start_time.timestamp() + 30 - time.time()))
    job = k8s_admin.batch.read_namespaced_job(name, namespace)
    assert not [c for c in job.status.conditions or [] if c.status == "True"]
    assert sync(request, k8s_backend, capture).status == RequestStatus.RUNNING

    # The real Job controller stops it at the max runtime from the pod's start...
    def stopped() -> Any:
        conditions = k8s_admin.batch.read_namespaced_job(name, namespace).status.conditions
        return next(
            (
                c
                for c in conditions or []
                if c.type in ("FailureTarget", "Failed") and c.status == "True"
            ),
            None,
        )

    failed = eventually(stopped, timeout=30, what="the Job stopped at its deadline")
    assert failed.reason == "DeadlineExceeded"
    assert (failed.last_transition_time - started).total_seconds() >= 15 - 1
    # ...and the portal calls that a timeout, not a failure.
    sync_until(
        request,
        k8s_backend,
        capture,
        lambda r: r.status != RequestStatus.RUNNING,
        timeout=30,
        what="the request stopped at its deadline",
    )
    assert request.status == RequestStatus.RECLAIMED


def test_a_crash_looping_notebook_backs_off_then_stops_when_it_crashes_the_same_way(
    k8s_backend: Any,
    k8s_admin: Admin,
    portal: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    settings: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    settings.CRASH_RETRY_BASE_SECONDS = 6
    capture = django_capture_on_commit_callbacks
    flavor = own_pool(portal, CRASH_NODE)
    apply_inventory(k8s_backend.sync_inventory())
    namespace = portal["project"].namespace
    image = "registry.example.com/ml/notebook:3"
    request = submit(portal, flavor, kind="notebook", image=image)
    crashing = {
        "labels": {CRASH_LOOP: "true"},
        "annotations": {f"{CRASH_LOOP}/exit-code": "137", f"{CRASH_LOOP}/reason": "OOMKilled"},
    }
    assert admit(capture) == [(request.pk, 1)]
    launch_with(request, k8s_backend, monkeypatch, **crashing)

    sync_until(
        request,
        k8s_backend,
        capture,
        lambda r: r.status == RequestStatus.QUEUED,
        timeout=30,
        what="the crash loop requeued",
    )
    requeued = time.monotonic()
    assert request.blocker["code"] == "retry_backoff"
    assert request.blocker["message"].startswith("It crashed (OOMKilled (exit code 137)); ")
    assert request.retry_not_before is not None
    first = Allocation.objects.get(request=request, attempt=1)
    assert (first.exit_code, first.exit_reason) == (137, "OOMKilled")
    assert first.end_reason == "crash_loop"
    # The crashed attempt's Deployment is gone, and the cycle does not relaunch it at once.
    eventually(
        lambda: not k8s_admin.apps.list_namespaced_deployment(namespace).items,
        timeout=15,
        what="attempt 1's Deployment deleted",
    )
    assert admit(capture) == []

    # After the backoff the cycle admits it again; the same image crashes the same way.
    admitted = eventually(lambda: admit(capture), timeout=20, what="the retry admitted")
    assert admitted == [(request.pk, 2)]
    assert time.monotonic() - requeued >= 4
    launch_with(request, k8s_backend, monkeypatch, **crashing)
    sync_until(
        request,
        k8s_backend,
        capture,
        lambda r: r.status in (RequestStatus.FAILED, RequestStatus.QUEUED),
        timeout=30,
        what="the second crash settled",
    )
    assert request.status == RequestStatus.FAILED
    reason = f"Failed — OOMKilled (exit code 137) twice with image {image}; not retried."
    assert request.status_reason == reason
    assert (
        api_client(portal["dev"]).get(f"/api/v1/requests/{request.pk}/").json()["status_reason"]
        == reason
    )
    event = AuditEvent.objects.filter(action="reclaim.crash_loop", target_id=str(request.pk))
    assert event.latest("pk").data["repeated"] is True
    eventually(
        lambda: not k8s_admin.apps.list_namespaced_deployment(namespace).items,
        timeout=15,
        what="attempt 2's Deployment deleted",
    )
