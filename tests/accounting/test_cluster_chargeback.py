"""Chargeback by cluster: a request's cost counts to the cluster of its allocation's pool, in
the API, the report page (with drill-down to the cluster's pools) and the idle capacity."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from accounting.selectors.usage import UsageQuery, chargeback
from accounting.services.metering import meter_usage
from scheduling.models import Cluster, NodePool, local_cluster_id
from tests.accounting.factories import make_allocation, make_request, set_price
from tests.scheduling.conftest import Fleet
from tests.support.clusters import make_cluster
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db
MONTH = date(2026, 6, 1)
START = datetime(2026, 6, 1, tzinfo=UTC)
NOW = datetime(2026, 6, 11, tzinfo=UTC)


def _two_clusters_of_usage(org: Org, fleet: Fleet) -> Cluster:
    """A100 work (2 cards, 10 h at 2.00) in cluster east; L4 work (1 share, 5 h) locally."""
    east = make_cluster(org.admin)
    NodePool.objects.filter(pk=fleet.a100.pool_id).update(cluster=east)
    set_price(fleet.a100, "2.00")
    set_price(fleet.l4_6g, "0.40")
    for flavor, cards, hours in ((fleet.a100, 2, 10), (fleet.l4_6g, 1, 5)):
        request = make_request(
            project=org.project_a, owner=org.dev_a, flavor=flavor, gpu_count=cards
        )
        make_allocation(request, started_at=START, ended_at=START + timedelta(hours=hours))
    meter_usage(now=NOW)
    return east


def test_chargeback_groups_cost_by_the_cluster_of_the_allocations_pool(
    org: Org, fleet: Fleet, settings: Any
) -> None:
    settings.BILLING_TIME_ZONE = "UTC"
    east = _two_clusters_of_usage(org, fleet)
    query = UsageQuery(month_from=MONTH, month_to=MONTH, group_by=("cluster",))
    report = chargeback(user=org.finance, query=query, now=NOW)
    by_cluster = {row["cluster"]: row["cost"] for row in report.rows}
    assert by_cluster == {"East": Decimal("40.000000"), "Local cluster": Decimal("2.000000")}
    assert {row["cluster_id"] for row in report.rows} == {east.pk, local_cluster_id()}
    assert report.idle is not None
    assert {p["pool"]: p["cluster"] for p in report.idle}[fleet.a100.pool.name] == "East"


def test_the_chargeback_api_groups_and_filters_by_cluster(
    org: Org, fleet: Fleet, settings: Any
) -> None:
    settings.BILLING_TIME_ZONE = "UTC"
    east = _two_clusters_of_usage(org, fleet)
    finance = api_client(org.finance)
    url = reverse("chargeback")
    grouped = finance.get(url, {"month": "2026-06", "group_by": "cluster,flavor"}).json()
    assert {(r["cluster"], r["flavor"]) for r in grouped["results"]} == {
        ("East", fleet.a100.name),
        ("Local cluster", fleet.l4_6g.name),
    }
    narrowed = finance.get(url, {"month": "2026-06", "group_by": "pool", "cluster": str(east.pk)})
    assert [r["pool"] for r in narrowed.json()["results"]] == [fleet.a100.pool.name]
    assert [p["pool"] for p in narrowed.json()["idle"]] == [fleet.a100.pool.name]
    unknown = finance.get(url, {"month": "2026-06", "cluster": "999999"})
    assert unknown.status_code == 400
    assert "cluster" in unknown.json()["error"]["fields"]
    lead = api_client(org.lead_a).get(url, {"month": "2026-06", "group_by": "cluster"}).json()
    assert sum(Decimal(r["cost"]) for r in lead["results"]) == Decimal("42")
    csv = finance.get(url, {"month": "2026-06", "group_by": "cluster", "export": "csv"})
    assert csv.content.decode().splitlines()[0].startswith("cluster_id,cluster,")


def test_the_report_page_groups_by_cluster_and_drills_down_to_its_pools(
    org: Org, fleet: Fleet, settings: Any
) -> None:
    settings.BILLING_TIME_ZONE = "UTC"
    east = _two_clusters_of_usage(org, fleet)
    client = Client()
    client.force_login(org.finance)
    page = client.get(
        reverse("reports-page"),
        {"month_from": "2026-06", "month_to": "2026-06", "group_by": "cluster"},
    ).content.decode()
    assert '<option value="cluster" selected>Cluster</option>' in page
    assert ">East<" in page and ">Local cluster<" in page
    assert f"cluster={east.pk}" in page and "group_by=pool" in page
    drilled = client.get(
        reverse("reports-page"),
        {
            "month_from": "2026-06",
            "month_to": "2026-06",
            "group_by": "pool",
            "cluster": str(east.pk),
        },
    ).content.decode()
    assert "Cluster: East" in drilled
    assert f">{fleet.a100.pool.name}<" in drilled and f">{fleet.l4_6g.pool.name}<" not in drilled
