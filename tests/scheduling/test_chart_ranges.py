"""The charts' time range: a preset or a custom from/to in the query string, honoured by the
server (so it works without script and is a link); a bad one is a 400 with a message. A
request's page charts its GPU activity over its whole life, and only for those who may see it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from scheduling.models import Allocation, GpuRequest, Node, UtilisationSample
from tests.scheduling.conftest import Fleet
from tests.support.cross_tenant import covers
from tests.support.factories import GpuRequestFactory
from tests.support.personas import Org

pytestmark = pytest.mark.django_db


def login(user: object) -> Client:
    client = Client()
    client.force_login(user)  # type: ignore[arg-type]
    return client


def running_since(org: Org, fleet: Fleet, *, days: float) -> tuple[GpuRequest, Allocation]:
    request = GpuRequestFactory.create(project=org.project_a, flavor=fleet.a100, to="running")
    allocation = Allocation.objects.get(request=request)
    started = timezone.now() - timedelta(days=days)
    Allocation.objects.filter(pk=allocation.pk).update(started_at=started)
    allocation.refresh_from_db()
    return request, allocation


def sample(allocation: Allocation, *, ago: timedelta, percent: float) -> None:
    UtilisationSample.objects.create(
        allocation=allocation,
        sampled_at=timezone.now() - ago,
        activity_percent=percent,
        memory_used_mib=4000,
    )


def test_a_node_page_charts_the_range_asked_for(org: Org, fleet: Fleet) -> None:
    _, allocation = running_since(org, fleet, days=10)
    sample(allocation, ago=timedelta(days=6), percent=80)
    node = Node.objects.get(name=allocation.claims[0]["node"])
    client = login(org.admin)
    url = reverse("fleet-node-page", args=[node.pk])

    default = client.get(url)
    week = client.get(url, {"range": "7d"})
    six_hours = client.get(url, {"range": "6h"})

    assert default.status_code == week.status_code == six_hours.status_code == 200
    assert default.context["window"].end - default.context["window"].start == timedelta(hours=48)
    assert week.context["window"].end - week.context["window"].start == timedelta(days=7)
    # The sample of six days ago is on the week's chart only.
    assert 80.0 in week.context["chart"]["datasets"][1]["data"]
    assert 80.0 not in default.context["chart"]["datasets"][1]["data"]
    assert len(six_hours.context["chart"]["labels"]) < len(default.context["chart"]["labels"])
    assert "selected>Last 7 days" in week.content.decode()


def test_a_custom_range_is_honoured_and_linkable(org: Org, fleet: Fleet) -> None:
    request, allocation = running_since(org, fleet, days=10)
    sample(allocation, ago=timedelta(days=8), percent=42)
    moment = timezone.localtime(timezone.now() - timedelta(days=8))
    start, end = moment - timedelta(hours=2), moment + timedelta(hours=2)
    fmt = "%Y-%m-%dT%H:%M"
    page = login(org.admin).get(
        reverse("fleet-pool-page", args=[fleet.a100.pool.slug]),
        {"range": "custom", "start": start.strftime(fmt), "end": end.strftime(fmt)},
    )
    assert page.status_code == 200
    window = page.context["window"]
    assert window.start == start.replace(second=0, microsecond=0)
    assert 42.0 in page.context["chart"]["datasets"][1]["data"]
    assert f'value="{start.strftime(fmt)}"' in page.content.decode()


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"range": "1y"}, "Select a valid choice"),
        ({"range": "custom", "start": "2026-01-02T00:00"}, "needs both a From and a To"),
        ({"range": "custom", "start": "yesterday", "end": "today"}, "Enter a valid date/time"),
        ({"start": "2026-01-02T00:00", "end": "2026-01-01T00:00"}, "From must be before To"),
        ({"start": "2025-01-01T00:00", "end": "2026-01-01T00:00"}, "at most 90 days"),
        ({"start": "2999-01-01T00:00", "end": "2999-01-02T00:00"}, "in the future"),
    ],
)
def test_a_bad_range_is_a_400_with_its_reason(
    org: Org, fleet: Fleet, query: dict[str, str], message: str
) -> None:
    node = Node.objects.first()
    assert node is not None
    for url in (
        reverse("fleet-node-page", args=[node.pk]),
        reverse("fleet-pool-page", args=[node.pool.slug]),
    ):
        page = login(org.admin).get(url, query)
        assert page.status_code == 400
        body = page.content.decode()
        assert 'data-testid="range-error"' in body and message in body
        # The page still shows the default range rather than nothing.
        assert page.context["window"].end - page.context["window"].start == timedelta(hours=48)


def test_a_request_page_charts_its_whole_life(org: Org, fleet: Fleet) -> None:
    """Ten days of running: the first day's activity is on the chart, not only the last hours;
    the range runs from its first start to now."""
    request, allocation = running_since(org, fleet, days=10)
    sample(allocation, ago=timedelta(days=9, hours=23), percent=12)
    sample(allocation, ago=timedelta(minutes=5), percent=97)
    page = login(org.dev_a).get(reverse("gpu-request-page", args=[request.pk]))
    assert page.status_code == 200
    window = page.context["window"]
    assert abs(window.start - allocation.started_at) < timedelta(seconds=1)
    assert timezone.now() - window.end < timedelta(minutes=1)
    activity = page.context["activity_chart"]["datasets"][0]["data"]
    # Points start at round moments (2 h here), so the first sample lands in the first or the
    # second point depending on the clock; it is the first value drawn either way.
    drawn = [value for value in activity if value is not None]
    assert drawn[0] == 12.0 and 12.0 in activity[:2] and 97.0 in activity[-2:]
    assert "selected>Whole life" in page.content.decode()

    day = login(org.dev_a).get(reverse("gpu-request-page", args=[request.pk]), {"range": "24h"})
    assert 12.0 not in day.context["activity_chart"]["datasets"][0]["data"]


def test_a_finished_request_charts_up_to_its_end(org: Org, fleet: Fleet) -> None:
    request, allocation = running_since(org, fleet, days=3)
    ended = timezone.now() - timedelta(days=1)
    Allocation.objects.filter(pk=allocation.pk).update(ended_at=ended)
    sample(allocation, ago=timedelta(days=2), percent=55)
    page = login(org.dev_a).get(reverse("gpu-request-page", args=[request.pk]))
    assert abs(page.context["window"].end - ended) < timedelta(seconds=1)
    assert 55.0 in page.context["activity_chart"]["datasets"][0]["data"]


def test_a_bad_range_on_a_request_page_is_a_400_with_its_reason(org: Org, fleet: Fleet) -> None:
    request, allocation = running_since(org, fleet, days=1)
    sample(allocation, ago=timedelta(hours=1), percent=30)
    page = login(org.dev_a).get(reverse("gpu-request-page", args=[request.pk]), {"range": "x"})
    assert page.status_code == 400
    assert "Select a valid choice" in page.content.decode()
    assert 30.0 in page.context["activity_chart"]["datasets"][0]["data"]  # whole life instead


@covers("gpu-request-page")
def test_another_teams_request_activity_is_not_found(org: Org, fleet: Fleet) -> None:
    request, allocation = running_since(org, fleet, days=1)
    sample(allocation, ago=timedelta(hours=1), percent=31)
    for query in ({}, {"range": "life"}, {"range": "7d"}, {"range": "bad"}):
        page = login(org.dev_b).get(reverse("gpu-request-page", args=[request.pk]), query)
        assert page.status_code == 404
        assert "31.0" not in page.content.decode()


def test_a_node_page_says_how_much_of_the_range_its_gpus_were_held(org: Org, fleet: Fleet) -> None:
    """A card held 2 of the last 48 hours is 95.8 % free, as finance's idle capacity counts it,
    though the work that held it was 70 % active."""
    request, allocation = running_since(org, fleet, days=0)
    node = Node.objects.get(name=allocation.claims[0]["node"])
    claim = {**allocation.claims[0], "device_index": 0}
    now = timezone.now()
    Allocation.objects.filter(pk=allocation.pk).update(
        claims=[claim],
        node_name=node.name,
        started_at=now - timedelta(hours=10),
        ended_at=now - timedelta(hours=8),
    )
    sample(allocation, ago=timedelta(hours=9), percent=70)
    page = login(org.admin).get(reverse("fleet-node-page", args=[node.pk]))
    detail = page.context["detail"]
    card = next(row for row in detail.gpus if row.device.index == 0)
    assert card.held_percent == pytest.approx(100 * 2 / 48, abs=0.1)
    assert card.window_activity_percent == 70.0
    gpus = len(detail.gpus)
    assert detail.held_percent == pytest.approx(100 * 2 / (48 * gpus), abs=0.1)
    assert detail.idle_percent == pytest.approx(100 - detail.held_percent, abs=0.1)
    body = page.content.decode()
    assert 'data-testid="node-range-summary"' in body and "idle capacity" in body
