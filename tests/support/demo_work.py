"""The seeded demo a few minutes into its day: its people's work submitted, approved, queued and
running (portal.demo_traffic), so that pages show full tables, waiting reasons and notices."""

from __future__ import annotations

import io
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import override_settings
from django.utils import timezone

from portal.demo_traffic import traffic_step
from runtime.services import execution
from runtime.tasks import sync_workloads
from scheduling.choices import RequestStatus, WorkloadKind
from scheduling.models import Flavor
from scheduling.services.requests import GpuRequestSpec, approve_gpu_request, submit_gpu_request
from scheduling.tasks import run_scheduling_cycle
from tenants.models import Project

# Past LEAD_DELAY_SECONDS: each step the leads decide what the step before submitted.
STEP_SECONDS = 150


def seed_demo_at_work(*, steps: int = 12, history_days: int = 7) -> None:
    """Seed the demo with `history_days` of history, then run `steps` demo-traffic steps,
    `STEP_SECONDS` apart in the traffic's own clock, each followed by a scheduling cycle and a
    workload sync on the simulated cluster; last, fill the L4 pool so that alice's work
    queues. Tasks run inline (tests/conftest.py): call it in a transactional test."""
    call_command("seed_demo", "--history-days", str(history_days), stdout=io.StringIO())
    start = timezone.now()
    with override_settings(DEMO_TRAFFIC=True, CLUSTER_BACKEND="simulated"):
        execution.cluster_backend.cache_clear()
        try:
            for step in range(steps):
                traffic_step(now=start + timedelta(seconds=STEP_SECONDS * step))
                run_scheduling_cycle()
                sync_workloads()
            _fill_the_l4_pool()
            run_scheduling_cycle()
        finally:
            execution.cluster_backend.cache_clear()


def _fill_the_l4_pool() -> None:
    """alice asks for more L4 shares than the pool holds, bob approves what needs him: some
    of it queues, with a reason."""
    users = get_user_model().objects.in_bulk(["alice", "bob"], field_name="username")
    flavor = Flavor.objects.get(slug="l4-12g")
    project = Project.objects.get(team__slug="vision", slug="detection")
    for number in range(4):
        request = submit_gpu_request(
            actor=users["alice"],
            spec=GpuRequestSpec(
                project=project,
                flavor=flavor,
                gpu_count=4,
                kind=WorkloadKind.NOTEBOOK,
                image="jupyter/pytorch-notebook:2024-10-07",
                max_runtime_seconds=3600,
                name=f"label-review-{number + 1}",
            ),
        )
        if request.status == RequestStatus.PENDING_APPROVAL:
            approve_gpu_request(actor=users["bob"], request=request)
