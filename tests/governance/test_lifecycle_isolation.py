"""Lifecycle isolation: a pool's short-request reserve, from the admin's setting to decisions,
the pool API, the request form, the fleet page and /metrics."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.db import IntegrityError, transaction
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from scheduling.choices import RequestStatus
from scheduling.models import Allocation, GpuRequest, NodePool
from scheduling.selectors.fleet import fleet_overview
from scheduling.services import cycle
from scheduling.services.quotas import set_quota
from tests.governance.conftest import Runner
from tests.scheduling.conftest import Fleet
from tests.support.factories import GpuRequestFactory
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db
HOUR = 3600


@pytest.fixture
def reserved(org: Org, fleet: Fleet) -> NodePool:
    """The 16-GPU A100 pool keeps 25 % (4 GPUs) for requests up to 2 h."""
    set_quota(actor=org.admin, team=org.team_a, flavor=fleet.a100, guaranteed=32, limit=32)
    NodePool.objects.filter(slug="a100-training").update(
        short_reserve_fraction=0.25, short_max_runtime_seconds=2 * HOUR
    )
    return NodePool.objects.get(slug="a100-training")


def test_long_request_waits_for_the_reserve_and_a_short_one_runs(
    org: Org, fleet: Fleet, reserved: NodePool, django_capture_on_commit_callbacks: Any
) -> None:
    long = GpuRequestFactory.create(
        project=org.project_a,
        flavor=fleet.a100,
        gpu_count=14,
        max_runtime_seconds=8 * HOUR,
        to="queued",
    )
    with django_capture_on_commit_callbacks(execute=False):
        cycle.run_cycle()
    long.refresh_from_db()
    assert long.status == RequestStatus.QUEUED
    assert f"pool {reserved.name} keeps 25% for requests up to 2 h" in long.waiting_reason

    short = GpuRequestFactory.create(
        project=org.project_a,
        flavor=fleet.a100,
        gpu_count=14,
        max_runtime_seconds=HOUR,
        to="queued",
    )
    with django_capture_on_commit_callbacks(execute=False):
        cycle.run_cycle()
    short.refresh_from_db()
    assert short.status == RequestStatus.ADMITTED


def test_without_a_reserve_the_same_long_request_runs(
    org: Org, fleet: Fleet, reserved: NodePool, django_capture_on_commit_callbacks: Any
) -> None:
    NodePool.objects.filter(pk=reserved.pk).update(short_reserve_fraction=0)
    long = GpuRequestFactory.create(
        project=org.project_a,
        flavor=fleet.a100,
        gpu_count=14,
        max_runtime_seconds=8 * HOUR,
        to="queued",
    )
    with django_capture_on_commit_callbacks(execute=False):
        cycle.run_cycle()
    long.refresh_from_db()
    assert long.status == RequestStatus.ADMITTED


@pytest.mark.parametrize("fraction", [-0.1, 1.5])
def test_database_refuses_a_reserve_outside_zero_to_one(fleet: Fleet, fraction: float) -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        NodePool.objects.filter(slug="a100-training").update(short_reserve_fraction=fraction)


def test_pool_api_shows_the_reserve_to_every_member(org: Org, reserved: NodePool) -> None:
    response = api_client(org.dev_b).get(reverse("pool-list"))
    assert response.status_code == 200
    pools = {row["slug"]: row for row in response.json()["results"]}
    assert pools["a100-training"]["short_reserve_fraction"] == 0.25
    assert pools["a100-training"]["short_max_runtime_seconds"] == 2 * HOUR
    assert pools["a100-training"]["short_reserve_label"] == "keeps 25% for requests up to 2 h"
    assert pools["l4-vgpu"]["short_reserve_label"] == ""


def test_admin_sets_the_reserve_through_the_api_within_zero_to_one(
    org: Org, reserved: NodePool
) -> None:
    url = reverse("pool-detail", args=[reserved.pk])
    admin = api_client(org.admin)
    response = admin.patch(url, {"short_reserve_fraction": 1.5}, format="json")
    assert response.status_code == 400
    assert "short_reserve_fraction" in response.json()["error"]["fields"]
    response = admin.patch(url, {"short_reserve_fraction": 0.5}, format="json")
    assert response.status_code == 200, response.content
    reserved.refresh_from_db()
    assert reserved.short_reserve_fraction == 0.5


def test_request_form_names_the_reserve_of_the_flavor_pool(org: Org, reserved: NodePool) -> None:
    client = Client()
    assert client.login(username="dev_a", password="pw-dev_a")
    page = client.get(reverse("gpu-request-new")).content.decode()
    assert "pool keeps 25% for requests up to 2 h" in page


def test_fleet_page_and_overview_split_waits_into_short_and_long(
    org: Org, reserved: NodePool, running: Runner
) -> None:
    short = running(minutes_ago=1, max_runtime_seconds=HOUR)
    long = running(minutes_ago=1, max_runtime_seconds=6 * HOUR)
    now = timezone.now()
    for request, waited in ((short, 60), (long, 3000)):
        GpuRequest.objects.filter(pk=request.pk).update(queued_at=now - timedelta(seconds=waited))
        Allocation.objects.filter(request=request).update(admitted_at=now)
    # The L4 pool: its default threshold (2 h) splits the two.
    l4 = next(p for p in fleet_overview() if p.pool == "l4-vgpu")
    assert l4.short_wait_p50_seconds == pytest.approx(60, abs=2)
    assert l4.long_wait_p50_seconds == pytest.approx(3000, abs=2)
    a100 = next(p for p in fleet_overview() if p.pool == "a100-training")
    assert a100.short_reserve == "keeps 25% for requests up to 2 h"

    admin = Client()
    assert admin.login(username="admin", password="pw-admin")
    page = admin.get(reverse("fleet-page")).content.decode()
    assert "keeps 25% for requests up to 2 h" in page
    assert 'data-testid="short-long-wait"' in page


def test_metrics_export_the_reserve_and_short_long_admission_waits(
    org: Org, reserved: NodePool, running: Runner
) -> None:
    short = running(minutes_ago=1, max_runtime_seconds=HOUR)
    now = timezone.now()
    GpuRequest.objects.filter(pk=short.pk).update(queued_at=now - timedelta(seconds=100))
    Allocation.objects.filter(request=short).update(admitted_at=now)
    text = Client(REMOTE_ADDR="127.0.0.1").get(reverse("metrics")).content.decode()
    assert 'gpu_portal_pool_short_reserve_ratio{pool="a100-training"} 0.25' in text
    assert (
        'gpu_portal_admission_wait_seconds_bucket{le="300",length="short",pool="l4-vgpu"} 1.0'
        in text
    )
    assert (
        'gpu_portal_admission_wait_seconds_bucket{le="60",length="short",pool="l4-vgpu"} 0.0'
        in text
    )


def test_admin_edits_the_reserve_and_out_of_range_values_are_refused(
    org: Org, reserved: NodePool
) -> None:
    client = Client()
    client.force_login(org.admin)
    url = reverse("manage-pools-edit", kwargs={"pk": reserved.pk})
    page = client.get(url).content.decode()
    assert 'name="short_reserve_fraction"' in page
    assert 'name="short_max_runtime_seconds"' in page

    def body(fraction: str) -> dict[str, Any]:
        return {
            "name": reserved.name,
            "slug": reserved.slug,
            "tier": reserved.tier_id,
            "sharing_mode": reserved.sharing_mode,
            "placement": reserved.placement,
            "scoring": reserved.scoring,
            "scheduler_name": reserved.scheduler_name,
            "node_selector": json.dumps(reserved.node_selector),
            "taints": json.dumps(reserved.taints),
            "allowed_kinds": json.dumps(reserved.allowed_kinds),
            "short_reserve_fraction": fraction,
            "short_max_runtime_seconds": str(reserved.short_max_runtime_seconds),
            "allocation": reserved.allocation,
        }

    refused = client.post(url, body("1.5"))
    assert refused.status_code == 400
    assert "short_reserve_fraction" in refused.context["form"].errors
    assert client.post(url, body("0.4")).status_code == 302
    reserved.refresh_from_db()
    assert reserved.short_reserve_fraction == pytest.approx(0.4)
