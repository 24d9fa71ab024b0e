from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from runtime import execution
from runtime.cluster.simulated import SimulatedCluster
from scheduling import cycle, services
from scheduling.choices import RequestStatus
from scheduling.models import Allocation, GpuRequest, ReclaimPolicy
from tests.scheduling.conftest import Fleet, fleet  # noqa: F401 — the fleet fixture
from tests.support.personas import Org

Runner = Callable[..., GpuRequest]


@pytest.fixture
def running(
    org: Org,
    fleet: Fleet,  # noqa: F811 — the fixture imported above
    django_capture_on_commit_callbacks: Any,
) -> Runner:
    """Submit, admit, launch and mark running a request that started `minutes_ago`."""
    # The product's default windows, not the demo's short ones.
    ReclaimPolicy.objects.update(
        idle_window_seconds=1800,
        notebook_idle_window_seconds=3600,
        idle_warning_seconds=600,
        timeout_warning_seconds=900,
        pending_timeout_seconds=1800,
    )

    def make(*, minutes_ago: float = 0, **overrides: Any) -> GpuRequest:
        arguments: dict[str, Any] = {
            "actor": org.dev_a,
            "project": org.project_a,
            "flavor": fleet.l4_6g,
            "gpu_count": 1,
            "image": "pytorch:2.4",
            "max_runtime_seconds": 4 * 3600,
            "kind": "job",
        }
        arguments.update(overrides)
        request = services.submit_gpu_request(**arguments)
        if request.status == RequestStatus.PENDING_APPROVAL:
            services.approve_gpu_request(actor=org.lead_a, request=request)
        with django_capture_on_commit_callbacks(execute=False):
            cycle.run_cycle()
        backend = SimulatedCluster(speed=1.0)
        execution.launch_request(request_id=request.pk, attempt=1, backend=backend)
        started = timezone.now() - timedelta(minutes=minutes_ago)
        request.refresh_from_db()
        execution.transition(request, RequestStatus.RUNNING, actor=None, reason="Running.")
        GpuRequest.objects.filter(pk=request.pk).update(started_at=started)
        Allocation.objects.filter(request=request).update(started_at=started)
        request.refresh_from_db()
        return request

    return make
