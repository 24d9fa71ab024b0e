"""Requests and allocations with chosen intervals, straight in the database."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from django.contrib.auth.models import User

from accounting.models import Price
from scheduling.choices import RequestStatus
from scheduling.models import Allocation, Flavor, GpuRequest
from tenants.models import Project


def make_request(
    *, project: Project, owner: User, flavor: Flavor, gpu_count: int = 1, **extra: Any
) -> GpuRequest:
    return GpuRequest.objects.create(
        project=project,
        team=project.team,
        owner=owner,
        flavor=flavor,
        gpu_count=gpu_count,
        image="registry.example.com/ml/pytorch:2.4",
        max_runtime_seconds=3600,
        gpu_equivalent=flavor.gpu_equivalent * gpu_count,
        status=extra.pop("status", RequestStatus.RUNNING),
        **extra,
    )


def make_allocation(
    request: GpuRequest,
    *,
    started_at: datetime | None,
    ended_at: datetime | None = None,
    attempt: int | None = None,
    is_preemptible: bool = False,
) -> Allocation:
    attempt = attempt or request.allocations.count() + 1
    return Allocation.objects.create(
        request=request,
        attempt=attempt,
        pool=request.flavor.pool,
        started_at=started_at,
        ended_at=ended_at,
        is_preemptible=is_preemptible,
    )


def set_price(
    flavor: Flavor,
    per_hour: str,
    *,
    since: datetime = datetime(2020, 1, 1, tzinfo=UTC),
    preemptible_multiplier: str = "1",
) -> Price:
    return Price.objects.create(
        flavor=flavor,
        price_per_hour=Decimal(per_hour),
        effective_from=since,
        preemptible_multiplier=Decimal(preemptible_multiplier),
    )
