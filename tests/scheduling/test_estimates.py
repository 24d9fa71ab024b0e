"""Estimated start of queued work: queue time plus the pool's recent median wait."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from scheduling.choices import RequestStatus
from scheduling.models import Allocation, Flavor, GpuRequest
from scheduling.selectors import estimated_starts
from tests.scheduling.conftest import Fleet
from tests.support.factories import GpuRequestFactory
from tests.support.personas import Org

pytestmark = pytest.mark.django_db


def admitted_after(org: Org, flavor: Flavor, wait_seconds: int, *, runtime_seconds: int) -> None:
    """A finished request of the pool that waited `wait_seconds` in the queue."""
    request = GpuRequestFactory.create(
        project=org.project_a, flavor=flavor, max_runtime_seconds=runtime_seconds
    )
    admitted = timezone.now() - timedelta(hours=1)
    GpuRequest.objects.filter(pk=request.pk).update(
        status=RequestStatus.SUCCEEDED, queued_at=admitted - timedelta(seconds=wait_seconds)
    )
    allocation = Allocation.objects.create(request=request, attempt=1, pool=flavor.pool)
    Allocation.objects.filter(pk=allocation.pk).update(admitted_at=admitted, ended_at=admitted)


def queued(org: Org, flavor: Flavor, *, waited_seconds: int, runtime_seconds: int) -> GpuRequest:
    request = GpuRequestFactory.create(
        project=org.project_a, flavor=flavor, max_runtime_seconds=runtime_seconds
    )
    GpuRequest.objects.filter(pk=request.pk).update(
        status=RequestStatus.QUEUED, queued_at=timezone.now() - timedelta(seconds=waited_seconds)
    )
    return GpuRequest.objects.select_related("flavor").get(pk=request.pk)


def test_queued_request_is_expected_after_the_median_wait_of_its_pool_and_length(
    org: Org, fleet: Fleet
) -> None:
    pool = fleet.l4_6g.pool
    pool.short_max_runtime_seconds = 2 * 3600
    pool.save()
    for wait in (60, 120, 600):
        admitted_after(org, fleet.l4_6g, wait, runtime_seconds=3600)  # short ones
    admitted_after(org, fleet.l4_6g, 7200, runtime_seconds=8 * 3600)  # a long one
    short = queued(org, fleet.l4_6g, waited_seconds=30, runtime_seconds=1800)
    long = queued(org, fleet.l4_6g, waited_seconds=30, runtime_seconds=6 * 3600)
    elsewhere = queued(org, fleet.a100, waited_seconds=30, runtime_seconds=1800)
    now = timezone.now()

    estimates = estimated_starts([short, long, elsewhere], now=now)
    assert short.queued_at and long.queued_at

    assert estimates[short.pk] == short.queued_at + timedelta(seconds=120)
    assert estimates[long.pk] == long.queued_at + timedelta(seconds=7200)
    assert estimates[elsewhere.pk] is None  # no admissions in that pool to go by


def test_an_overdue_estimate_is_now_and_running_work_has_none(org: Org, fleet: Fleet) -> None:
    admitted_after(org, fleet.l4_6g, 60, runtime_seconds=3600)
    late = queued(org, fleet.l4_6g, waited_seconds=900, runtime_seconds=3600)
    running = GpuRequestFactory.create(project=org.project_a, flavor=fleet.l4_6g)
    GpuRequest.objects.filter(pk=running.pk).update(status=RequestStatus.RUNNING)
    running.refresh_from_db()
    now = timezone.now()
    estimates = estimated_starts([late, running], now=now)
    assert estimates == {late.pk: now}


def test_developer_dashboard_shows_the_estimated_start(org: Org, fleet: Fleet) -> None:
    admitted_after(org, fleet.l4_6g, 3 * 3600, runtime_seconds=3600)
    queued(org, fleet.l4_6g, waited_seconds=0, runtime_seconds=3600)
    client = Client()
    client.force_login(org.dev_a)
    page = client.get(reverse("home")).content.decode()
    assert "in ≈ 2\xa0hours" in page or "in ≈ 3\xa0hours" in page
