"""The platform admin's fleet drill-down: pools, then nodes, then GPUs, with activity over time."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from scheduling.models import Allocation, Node, UtilisationSample
from tests.scheduling.conftest import Fleet
from tests.support.factories import GpuRequestFactory
from tests.support.personas import Org

pytestmark = pytest.mark.django_db


def login(user: object) -> Client:
    client = Client()
    client.force_login(user)  # type: ignore[arg-type]
    return client


def test_fleet_drills_down_to_pools_nodes_and_gpus(org: Org, fleet: Fleet) -> None:
    request = GpuRequestFactory.create(project=org.project_a, flavor=fleet.a100, to="running")
    allocation = Allocation.objects.get(request=request)
    UtilisationSample.objects.create(
        allocation=allocation, sampled_at=timezone.now(), activity_percent=64, memory_used_mib=9000
    )
    client = login(org.admin)
    pool = fleet.a100.pool
    overview = client.get(reverse("fleet-page")).content.decode()
    assert reverse("fleet-pool-page", args=[pool.slug]) in overview

    pool_page = client.get(reverse("fleet-pool-page", args=[pool.slug])).content.decode()
    node = Node.objects.get(name=allocation.claims[0]["node"])
    assert reverse("fleet-node-page", args=[node.pk]) in pool_page
    chart = json.loads(
        re.search(
            r'<script id="pool-activity" type="application/json">(.*?)</script>', pool_page
        ).group(1)  # type: ignore[union-attr]
    )
    assert len(chart["labels"]) == 97  # a point every 30 minutes over the default 48 hours
    assert chart["datasets"][0]["data"][-1] == 1.0  # one whole card allocated now
    assert chart["datasets"][1]["data"][-1] == 64.0

    node_page = client.get(reverse("fleet-node-page", args=[node.pk])).content.decode()
    gpus = node_page[node_page.index('data-testid="node-gpus"') :]
    assert reverse("gpu-request-page", args=[request.pk]) in gpus
    assert "64.0 %" in gpus and "free" in gpus


@pytest.mark.parametrize("username", ["dev_a", "lead_a", "finance"])
def test_only_platform_admins_drill_into_the_fleet(org: Org, fleet: Fleet, username: str) -> None:
    client = login(getattr(org, username))
    node = Node.objects.first()
    assert node is not None
    assert client.get(reverse("fleet-pool-page", args=[node.pool.slug])).status_code == 404
    assert client.get(reverse("fleet-node-page", args=[node.pk])).status_code == 404


def test_a_node_chart_keeps_gpu_equivalents_and_percent_apart_and_within_the_node(
    org: Org, fleet: Fleet
) -> None:
    """Two jobs one after the other on gpu0 in one hour hold one card, not two; the card's
    48-hour mean weighs each job by the hours it held it, as finance's efficiency does."""
    hour = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    first = GpuRequestFactory.create(project=org.project_a, flavor=fleet.a100, to="running")
    allocation = Allocation.objects.get(request=first)
    node = Node.objects.get(name=allocation.claims[0]["node"])
    claim = {**allocation.claims[0], "device_index": 0}
    Allocation.objects.filter(pk=allocation.pk).update(
        claims=[claim],
        node_name=node.name,
        started_at=hour - timedelta(hours=3),
        ended_at=hour + timedelta(minutes=20),
    )
    second = GpuRequestFactory.create(project=org.project_a, flavor=fleet.a100, to="running")
    later = Allocation.objects.get(request=second)
    Allocation.objects.filter(pk=later.pk).update(
        claims=[claim], node_name=node.name, started_at=hour + timedelta(minutes=30)
    )
    for held, percent in ((allocation, 90), (later, 10)):
        UtilisationSample.objects.create(
            allocation=held,
            sampled_at=hour + timedelta(minutes=40 if held == later else 10),
            activity_percent=percent,
            memory_used_mib=1000,
        )
    page = login(org.admin).get(reverse("fleet-node-page", args=[node.pk]))
    chart = page.context["chart"]
    ge, percent = chart["datasets"]
    assert (ge["yAxisID"], percent["yAxisID"]) == ("ge", "percent")
    assert chart["scales"]["percent"]["max"] == 100
    assert "GPU-equivalents" in chart["scales"]["ge"]["title"]["text"]
    gpus = Node.objects.get(pk=node.pk).devices.count()
    assert max(ge["data"]) <= gpus and max(ge["data"]) == 1.0  # one card, in turn
    row = next(r for r in page.context["detail"].gpus if r.device.index == 0)
    # 3 h 20 at 90 % and at most 1 h 30 at 10 %: weighted by hours held, not 50 % for two jobs.
    assert row.window_activity_percent is not None and row.window_activity_percent > 60
    assert 'data-testid="activity-method"' in page.content.decode()
