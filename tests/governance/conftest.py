from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from scheduling.models import Allocation, GpuRequest, ReclaimPolicy
from tests.scheduling.conftest import Fleet, fleet  # noqa: F401 — the fleet fixture
from tests.support.factories import GpuRequestFactory
from tests.support.personas import Org

Runner = Callable[..., GpuRequest]


@pytest.fixture
def running(org: Org, fleet: Fleet) -> Runner:  # noqa: F811 — the fixture imported above
    """A request of team A's developer, running (see GpuRequestFactory) since `minutes_ago`."""
    # The product's default windows, not the demo's short ones.
    ReclaimPolicy.objects.update(
        idle_window_seconds=1800,
        notebook_idle_window_seconds=3600,
        idle_warning_seconds=600,
        timeout_warning_seconds=900,
        pending_timeout_seconds=1800,
    )

    def make(*, minutes_ago: float = 0, **overrides: Any) -> GpuRequest:
        fields = {"project": org.project_a, "flavor": fleet.l4_6g, "max_runtime_seconds": 4 * 3600}
        request = GpuRequestFactory.create(to="running", **{**fields, **overrides})
        started = timezone.now() - timedelta(minutes=minutes_ago)
        GpuRequest.objects.filter(pk=request.pk).update(started_at=started)
        Allocation.objects.filter(request=request).update(started_at=started)
        request.refresh_from_db()
        return request

    return make
