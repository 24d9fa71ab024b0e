"""The sharing report's API and pages: fields, who may read them, bad queries, the fleet's
pilot list; and the demo's history gives every sharing pool figures and a verdict."""

from __future__ import annotations

import re
import statistics
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from portal.demo_requests import BENCHMARKS
from scheduling.choices import RequestStatus
from scheduling.models import Allocation, Flavor, GpuRequest, NodePool
from tests.accounting.factories import make_allocation, make_request
from tests.scheduling.conftest import Fleet
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db
HOUR = 3600
READERS = ("admin", "finance")
OTHERS = ("lead_a", "dev_a", "lead_b", "dev_b", "nobody")
POOL_FIELDS = {
    "pool_id",
    "pool",
    "slug",
    "sharing_mode",
    "is_pilot",
    "pilot_until",
    "pilot_teams",
    "gpus",
    "capacity_gpu_hours",
    "busy_gpu_hours",
    "sold_gpu_equivalent_hours",
    "ge_sold_per_gpu",
    "unsold_percent",
    "ge_sold_per_busy_gpu",
    "shares_per_busy_gpu",
    "activity_percent_per_ge",
    "memory_headroom_percent",
    "stranded_gpu_hours",
    "shared_runs",
    "alone_runs",
    "compared_runs",
    "slowdown",
    "jitter",
    "verdict",
    "verdict_line",
}


def login(user: object) -> Client:
    client = Client()
    client.force_login(user)  # type: ignore[arg-type]
    return client


def bench_run(
    org: Org, flavor: Flavor, *, index: int, started_hours_ago: float, seconds: float, image: str
) -> Allocation:
    """A finished, succeeded job of team A on card `index` of the pool's first node."""
    started = timezone.now() - timedelta(hours=started_hours_ago)
    request = make_request(
        project=org.project_a,
        owner=org.dev_a,
        flavor=flavor,
        status=RequestStatus.SUCCEEDED,
        command=["python", "bench.py"],
    )
    GpuRequest.objects.filter(pk=request.pk).update(image=image)
    allocation = make_allocation(
        request, started_at=started, ended_at=started + timedelta(seconds=seconds)
    )
    node = flavor.pool.nodes.order_by("name").first()
    assert node is not None
    allocation.claims = [
        {
            "node": node.name,
            "device_index": index,
            "whole": False,
            "memory_mib": flavor.gpu_memory_mib,
            "cores_percent": flavor.gpu_cores_percent,
            "mig_profile": flavor.mig_profile,
        }
    ]
    allocation.end_reason = RequestStatus.SUCCEEDED
    allocation.save(update_fields=["claims", "end_reason"])
    return allocation


@pytest.fixture
def benchmarks(org: Org, fleet: Fleet) -> NodePool:
    """On the L4 pool: the benchmark twice alone (1 h), five times beside a neighbour (1.05 h)."""
    for day in (10, 9):
        bench_run(
            org, fleet.l4_6g, index=0, started_hours_ago=day * 24, seconds=HOUR, image="bench:1"
        )
    for day in (8, 7, 6, 5, 4):
        hours_ago = day * 24
        bench_run(
            org, fleet.l4_6g, index=1, started_hours_ago=hours_ago + 0.5,
            seconds=3 * HOUR, image="prep:1",
        )  # fmt: skip
        bench_run(
            org, fleet.l4_6g, index=1, started_hours_ago=hours_ago, seconds=1.05 * HOUR,
            image="bench:1",
        )  # fmt: skip
    return fleet.l4_6g.pool


def test_report_gives_each_pool_its_figures_and_verdict(org: Org, benchmarks: NodePool) -> None:
    response = api_client(org.finance).get(reverse("sharing-report"))
    assert response.status_code == 200
    body = response.json()
    today = timezone.localdate()
    assert body["to"] == today.isoformat()
    assert body["from"] == (today - timedelta(days=29)).isoformat()
    assert body["thresholds"]["min_compared_runs"] == 5
    pools = {pool["slug"]: pool for pool in body["pools"]}
    assert set(pools) == set(NodePool.objects.values_list("slug", flat=True))
    l4 = pools[benchmarks.slug]
    assert set(l4) == POOL_FIELDS
    assert (l4["alone_runs"], l4["compared_runs"]) == (2, 5)
    assert l4["slowdown"] == 1.05
    assert l4["jitter"] == 0.0
    # A few benchmark hours in 30 days leave the pool almost wholly unsold: it does not pay,
    # however little the shared runs slowed down.
    assert l4["unsold_percent"] > 95
    assert l4["verdict"] == "unsold"
    assert l4["verdict_line"].startswith("does not pay yet: ")
    assert l4["verdict_line"].endswith("slowdown 1.05× ± 0.00")
    assert l4["sold_gpu_equivalent_hours"] == pytest.approx(0.25 * (2 + 5 * 3 + 5 * 1.05), abs=0.01)
    assert pools["a100-training"]["verdict"] == "not_shared"


def test_report_narrows_to_one_pool_and_period(org: Org, benchmarks: NodePool) -> None:
    today = timezone.localdate()
    query = {
        "pool": str(benchmarks.pk),
        "from": (today - timedelta(days=7)).isoformat(),
        "to": today.isoformat(),
    }
    body = api_client(org.admin).get(reverse("sharing-report"), query).json()
    (l4,) = body["pools"]
    assert l4["pool_id"] == benchmarks.pk
    assert l4["alone_runs"] == 0  # the alone runs were 9 and 10 days ago
    assert l4["verdict"] == "no_data"


@pytest.mark.parametrize("persona", OTHERS)
def test_only_finance_and_admins_read_the_report(
    org: Org, benchmarks: NodePool, persona: str
) -> None:
    response = api_client(getattr(org, persona)).get(reverse("sharing-report"))
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden"
    assert "pools" not in response.json()
    page = login(getattr(org, persona)).get(reverse("sharing-report-page"))
    assert page.status_code == 404
    fragment = login(getattr(org, persona)).get(reverse("sharing-pilots-fragment"))
    assert fragment.status_code == 404


def test_anonymous_callers_are_refused(org: Org) -> None:
    assert api_client(None).get(reverse("sharing-report")).status_code == 401
    page = Client().get(reverse("sharing-report-page"))
    assert page.status_code == 302


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"from": "2026-13-01"}, "from"),
        ({"to": "yesterday"}, "to"),
        ({"from": "2026-11-10", "to": "2026-11-01"}, "from"),
        ({"from": "2024-01-01", "to": "2026-01-01"}, "from"),
        ({"from": "1900-01-01", "to": "1900-01-02"}, "from"),
        ({"pool": "999999"}, "pool"),
        ({"pool": "l4"}, "pool"),
    ],
)
def test_bad_queries_are_400_naming_the_field(
    org: Org, fleet: Fleet, query: dict[str, str], field: str
) -> None:
    response = api_client(org.admin).get(reverse("sharing-report"), query)
    assert response.status_code == 400
    assert field in response.json()["error"]["fields"]
    page = login(org.admin).get(reverse("sharing-report-page"), query)
    assert page.status_code == 400
    assert f'data-testid="error-{field}"' in page.content.decode()


@pytest.mark.parametrize("persona", READERS)
def test_page_shows_each_pool_with_its_verdict(
    org: Org, benchmarks: NodePool, persona: str
) -> None:
    response = login(getattr(org, persona)).get(reverse("sharing-report-page"))
    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-testid="sharing-table"' in html
    assert "sharing pays:" not in html  # beside a pool more than 95 % unsold
    assert "does not pay yet:" in html and "% unsold" in html
    assert "slowdown 1.05× ± 0.00" in html
    assert "whole cards, not shared" in html
    # One sold figure per pool: GE per card of its capacity, with the unsold share.
    assert "Per card in use" not in html
    sold = re.search(rf'data-testid="sold-{benchmarks.slug}">([^<]+)<', html)
    assert sold is not None and sold.group(1).endswith(" GE")


def test_fleet_page_lists_pilots_with_their_figures(org: Org, benchmarks: NodePool) -> None:
    benchmarks.is_pilot = True
    benchmarks.pilot_until = timezone.localdate() + timedelta(days=10)
    benchmarks.save()
    benchmarks.pilot_teams.set([org.team_a])
    admin = login(org.admin)
    fleet_page = admin.get(reverse("fleet-page")).content.decode()
    assert reverse("sharing-pilots-fragment") in fleet_page
    html = admin.get(reverse("sharing-pilots-fragment")).content.decode()
    assert 'data-testid="pilot-table"' in html
    assert html.count('data-testid="sharing-row"') == 1
    assert "Team A" in html
    assert "does not pay yet:" in html and "sharing pays:" not in html


def test_fleet_pilot_list_says_when_there_is_none(org: Org, fleet: Fleet) -> None:
    html = login(org.admin).get(reverse("sharing-pilots-fragment")).content.decode()
    assert "No pool is a pilot" in html


def test_an_ended_pilot_shows_it_is_open_to_its_tier(org: Org, benchmarks: NodePool) -> None:
    benchmarks.is_pilot = True
    benchmarks.pilot_until = timezone.localdate() - timedelta(days=1)
    benchmarks.save()
    html = login(org.finance).get(reverse("sharing-pilots-fragment")).content.decode()
    assert 'data-testid="pilot-ended"' in html
    assert 'data-testid="pilot-badge"' not in html


def _seeded_slowdown(name: str, report: dict[str, Any]) -> float:
    """The demo's nightly benchmark `name`: its runs beside a neighbour (card 1) over the median
    of its runs alone (card 0), averaged, read straight from the seeded allocations that ended
    in the report's period (the report counts those alone)."""
    start = datetime.fromisoformat(report["period_start"])
    end = datetime.fromisoformat(report["period_end"])
    runs: dict[int, list[float]] = {0: [], 1: []}
    ended = Allocation.objects.filter(request__name=name, ended_at__range=(start, end))
    for allocation in ended:
        seconds = (allocation.ended_at - allocation.started_at).total_seconds()
        runs[allocation.claims[0]["device_index"]].append(seconds)
    alone = statistics.median(runs[0])
    return statistics.mean(seconds / alone for seconds in runs[1])


def _demo_report(settings: Any) -> dict[str, Any]:
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    settings.DEMO_PASSWORD = "demo-test"
    call_command("seed_demo", "--history-days", "90")
    root = get_user_model().objects.get(username="root")
    response = api_client(root).get(reverse("sharing-report"))
    assert response.status_code == 200
    return response.json()


def test_the_seeded_demo_yields_figures_and_verdicts(settings: Any) -> None:
    report = _demo_report(settings)
    pools = {pool["slug"]: pool for pool in report["pools"]}
    for slug in ("l4-vgpu", "h100-mig"):
        pool = pools[slug]
        assert pool["compared_runs"] >= 20, pool
        assert pool["ge_sold_per_gpu"] > 0
        # The verdict agrees with what is sold: "pays" only with half the capacity sold.
        sold_enough = pool["ge_sold_per_gpu"] >= report["thresholds"]["min_ge_sold_per_gpu"]
        assert pool["verdict"] == ("pays" if sold_enough else "unsold"), pool
        assert pool["activity_percent_per_ge"] is not None
        assert pool["memory_headroom_percent"] is not None
    for slug, name in (("l4-vgpu", BENCHMARKS[0][3]), ("h100-mig", BENCHMARKS[1][3])):
        assert pools[slug]["slowdown"] == pytest.approx(_seeded_slowdown(name, report), abs=1e-3)
    assert pools["l4-vgpu"]["is_pilot"] is True
    assert pools["l4-vgpu"]["pilot_teams"] == ["Speech", "Vision"]
    assert pools["a100-training"]["verdict"] == "not_shared"
