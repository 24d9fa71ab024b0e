"""End to end through a real Celery worker process and a real Redis, observed through the API."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from django.urls import reverse

from runtime.models import SimulatedWorkload
from tests.scheduling.conftest import Fleet
from tests.scheduling.helpers import request_body
from tests.support.personas import Org, api_client
from tests.support.worker import WorkerProcess, celery_worker

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def wait_for(check: Callable[[], Any], *, timeout: float, worker: WorkerProcess, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(
        f"timed out waiting for {what}\n--- worker log ---\n{worker.output()[-5000:]}"
    )


def test_submit_approve_queue_admit_run_succeed_through_a_real_worker(
    org: Org, fleet: Fleet, clean_redis: str
) -> None:
    client = api_client(org.dev_a)
    seen: list[str] = []

    def status_of(pk: int) -> str:
        status = client.get(reverse("gpu-request-detail", kwargs={"pk": pk})).json()["status"]
        if not seen or seen[-1] != status:
            seen.append(status)
        return str(status)

    # At 20× a job runs 3-15 s: long enough that sync always sees it running.
    with celery_worker(clean_redis, SIMULATION_SPEED="20") as worker:
        created = client.post(
            reverse("gpu-request-list"),
            request_body(org.project_a, fleet.a100, gpu_count=2),
            format="json",
        ).json()
        assert created["status"] == "pending_approval"
        approve = reverse("gpu-request-approve", kwargs={"pk": created["id"]})
        assert api_client(org.lead_a).post(approve, {}, format="json").json()["status"] in (
            "queued",
            "admitted",
            "launching",
        )
        wait_for(
            lambda: status_of(created["id"]) == "running",
            timeout=60,
            worker=worker,
            what="running",
        )
        wait_for(
            lambda: status_of(created["id"]) in ("succeeded", "failed"),
            timeout=60,
            worker=worker,
            what="the end",
        )
    order = ["queued", "admitted", "launching", "running"]
    observed = [s for s in seen if s in order]
    assert observed == sorted(observed, key=order.index)  # never backwards
    assert SimulatedWorkload.objects.filter(request_key=str(created["id"])).count() == 1


def test_worker_killed_mid_launch_still_runs_the_request_exactly_once(
    org: Org, fleet: Fleet, clean_redis: str
) -> None:
    from scheduling.models import GpuRequest

    client = api_client(org.dev_a)
    # Each launch takes 3 s before the workload exists: time to kill the worker inside it.
    with celery_worker(clean_redis, SIMULATED_LAUNCH_DELAY_SECONDS="3") as worker:
        created = client.post(
            reverse("gpu-request-list"),
            request_body(org.project_a, fleet.l4_6g, kind="notebook"),
            format="json",
        ).json()
        wait_for(
            lambda: GpuRequest.objects.get(pk=created["id"]).status == "launching",
            timeout=60,
            worker=worker,
            what="launching",
        )
        # The kill must land inside the launch: the task had started and not ended, and the
        # workload did not exist yet.
        assert "runtime.tasks.launch_workload" in worker.kill(), worker.output()[-4000:]
        assert not SimulatedWorkload.objects.exists()
        worker.start()
        wait_for(
            # A short simulated notebook may already have finished when we look.
            lambda: GpuRequest.objects.get(pk=created["id"]).status in ("running", "succeeded"),
            timeout=90,
            worker=worker,
            what="running after the restart",
        )
    assert SimulatedWorkload.objects.filter(request_key=str(created["id"])).count() == 1
    request = GpuRequest.objects.get(pk=created["id"])
    assert request.attempt == 1
    assert request.allocations.count() == 1
