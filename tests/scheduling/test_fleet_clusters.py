"""The fleet page groups pools under their clusters, each with its health and scheduler mode."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from scheduling.models import Cluster, NodePool
from scheduling.selectors.clusters import fleet_by_cluster
from scheduling.selectors.fleet import fleet_overview
from tests.scheduling.conftest import Fleet
from tests.support.clusters import make_cluster
from tests.support.personas import Org

pytestmark = pytest.mark.django_db


def _groups(page: str) -> dict[str, str]:
    """Each cluster's slug and the page text from its heading row to the next one."""
    parts = re.split(r'(?=<tr class="table-light" data-testid="cluster-group")', page)
    found = {}
    for part in parts[1:]:
        slug = re.search(r'data-cluster="([^"]+)"', part)
        assert slug is not None
        found[slug.group(1)] = part.split("</tbody>")[0]
    return found


def test_the_fleet_page_groups_pools_by_cluster_with_health_and_mode(
    org: Org, fleet: Fleet
) -> None:
    east = make_cluster(org.admin, scheduler="kueue")
    NodePool.objects.filter(pk=fleet.a100.pool_id).update(cluster=east)
    failed_at = timezone.now() - timedelta(minutes=5)
    Cluster.objects.filter(pk=east.pk).update(
        last_contact_at=failed_at - timedelta(minutes=1),
        last_error="connection refused",
        last_error_at=failed_at,
    )
    west = make_cluster(org.admin, slug="west")
    Cluster.objects.filter(pk=west.pk).update(last_contact_at=timezone.now())
    client = Client()
    client.force_login(org.admin)
    page = client.get(reverse("fleet-page")).content.decode()
    groups = _groups(page)
    assert list(groups) == ["local", "east", "west"]
    a100_link = reverse("fleet-pool-page", args=[fleet.a100.pool.slug])
    assert a100_link in groups["east"] and a100_link not in groups["local"]
    mig_link = reverse("fleet-pool-page", args=[fleet.mig_1g.pool.slug])
    assert mig_link in groups["local"]
    assert "unreachable since" in groups["east"] and "connection refused" in groups["east"]
    assert 'data-testid="cluster-scheduler">kueue<' in groups["east"]
    assert "reachable" in groups["west"] and "no pools yet" in groups["west"]
    assert "gpu-east.example" in groups["east"]


def test_fleet_by_cluster_keeps_every_pool_row_once(org: Org, fleet: Fleet) -> None:
    east = make_cluster(org.admin)
    NodePool.objects.filter(pk=fleet.l4_6g.pool_id).update(cluster=east)
    rows = fleet_overview()
    groups = fleet_by_cluster(rows)
    assert sorted(r.pool for g in groups for r in g.pools) == sorted(r.pool for r in rows)
    assert [r.pool for r in groups[1].pools] == [fleet.l4_6g.pool.slug]
    assert groups[0].is_local and not groups[1].is_local
