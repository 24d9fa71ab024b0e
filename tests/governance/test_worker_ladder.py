"""The idle ladder end to end: a real worker samples, warns and reclaims an idle notebook."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone

from runtime.cluster.simulated import SCALED_TO_ZERO
from runtime.models import SimulatedWorkload
from scheduling.models import GpuRequest, ReclaimPolicy
from tenants.models import AuditEvent
from tests.scheduling.conftest import Fleet
from tests.scheduling.helpers import request_body
from tests.support.personas import Org, api_client
from tests.support.worker import celery_worker

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def wait_until(check: Any, timeout: float, output: Any) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out\n{output()[-4000:]}")


def test_idle_notebook_is_warned_then_reclaimed_by_the_worker(
    org: Org, fleet: Fleet, clean_redis: str
) -> None:
    ReclaimPolicy.objects.update(
        idle_window_seconds=8, notebook_idle_window_seconds=8, idle_warning_seconds=4
    )
    env = {"SAMPLE_INTERVAL_SECONDS": "0.5", "RECLAIM_INTERVAL_SECONDS": "0.5"}
    with celery_worker(clean_redis, **env) as worker:
        created = (
            api_client(org.dev_a)
            .post(
                reverse("gpu-request-list"),
                request_body(
                    org.project_a, fleet.l4_12g, kind="notebook", max_runtime_seconds=3600
                ),
                format="json",
            )
            .json()
        )
        wait_until(
            lambda: SimulatedWorkload.objects.filter(request_key=str(created["id"])).exists(),
            60,
            worker.output,
        )
        # It sits idle, and would run far longer than the test.
        SimulatedWorkload.objects.update(
            utilisation_percent=1, ends_at=timezone.now() + timedelta(hours=1)
        )
        wait_until(
            lambda: GpuRequest.objects.get(pk=created["id"]).status == "reclaimed",
            90,
            worker.output,
        )
        # The scale-down is queued after the reclaim commits; let the worker carry it out. A
        # notebook is scaled to zero, not deleted, so that it can be resumed.
        wait_until(
            lambda: SimulatedWorkload.objects.filter(
                request_key=str(created["id"]), failure_reason=SCALED_TO_ZERO
            ).exists(),
            30,
            worker.output,
        )
    actions = list(
        AuditEvent.objects.filter(target_id=str(created["id"]), action__startswith="reclaim.")
        .order_by("id")
        .values_list("action", flat=True)
    )
    assert actions == ["reclaim.idle_warning", "reclaim.idle"]
    evidence = AuditEvent.objects.get(target_id=str(created["id"]), action="reclaim.idle").data
    assert evidence["peak_activity_percent"] <= 1.0 and evidence["samples"] >= 2
    (kept,) = SimulatedWorkload.objects.filter(request_key=str(created["id"]))
    assert kept.failure_reason == SCALED_TO_ZERO
