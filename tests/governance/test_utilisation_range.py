"""`GET /api/v1/requests/{id}/utilisation/?range=…`: the request page's chart points over the
range its time-range picker takes; a bad range is a 400 that says why; another team's request is
404 whatever the range."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from scheduling.models import Allocation, GpuRequest, UtilisationSample
from tests.governance.conftest import Runner
from tests.support.factories import GpuRequestFactory
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db

FIVE_MINUTES = timedelta(minutes=5)


def url(request: GpuRequest) -> str:
    return reverse("gpu-request-utilisation", kwargs={"pk": request.pk})


def floor(moment: datetime, step: timedelta) -> datetime:
    seconds = step.total_seconds()
    return datetime.fromtimestamp(moment.timestamp() // seconds * seconds, tz=UTC)


def sample(request: GpuRequest, at: datetime, activity: float, memory_mib: int) -> None:
    UtilisationSample.objects.create(
        allocation=Allocation.objects.get(request=request),
        sampled_at=at,
        activity_percent=activity,
        memory_used_mib=memory_mib,
    )


def when(moment: str) -> datetime:
    return datetime.fromisoformat(moment.replace("Z", "+00:00"))


def test_a_range_gives_the_charts_points_mean_activity_and_peak_memory(
    org: Org, running: Runner
) -> None:
    request = running(minutes_ago=8 * 60)
    # 6 hours are 73 points 5 minutes apart (the shortest step keeping at most 150 points).
    bucket = floor(timezone.now() - timedelta(hours=2), FIVE_MINUTES)
    sample(request, bucket + timedelta(minutes=1), 40.0, 1000)
    sample(request, bucket + timedelta(minutes=3), 60.0, 3000)
    sample(request, timezone.now() - timedelta(hours=7), 99.0, 9000)  # before the range

    before = timezone.now()
    response = api_client(org.dev_a).get(url(request), {"range": "6h"})

    assert response.status_code == 200, response.content
    points = response.json()
    moments = [when(point["sampled_at"]) for point in points]
    assert moments[0] == floor(before - timedelta(hours=6), FIVE_MINUTES)
    assert all(b - a == FIVE_MINUTES for a, b in zip(moments, moments[1:], strict=False))
    assert moments[-1] <= timezone.now() < moments[-1] + FIVE_MINUTES
    taken = [point for point in points if point["activity_percent"] is not None]
    assert taken == [
        {
            "sampled_at": points[moments.index(bucket)]["sampled_at"],
            "activity_percent": 50.0,
            "memory_used_mib": 3000,
        }
    ]


def test_without_a_range_the_newest_samples_come_raw(org: Org, running: Runner) -> None:
    request = running(minutes_ago=60)
    now = timezone.now()
    sample(request, now - timedelta(minutes=2), 40.0, 1000)
    sample(request, now - timedelta(minutes=1), 60.0, 3000)

    points = api_client(org.dev_a).get(url(request)).json()

    assert [(p["activity_percent"], p["memory_used_mib"]) for p in points] == [
        (40.0, 1000),
        (60.0, 3000),
    ]


def test_a_custom_range_and_the_whole_life(org: Org, running: Runner) -> None:
    request = running(minutes_ago=30)
    at = floor(timezone.now() - timedelta(minutes=20), timedelta(minutes=1))
    sample(request, at + timedelta(seconds=10), 70.0, 2048)
    local = timezone.localtime(at)
    custom = {
        "range": "custom",
        "start": (local - timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M"),
        "end": (local + timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M"),
    }
    client = api_client(org.dev_a)

    for query in (custom, {"range": "life"}):
        points = client.get(url(request), query).json()
        # Up to 150 points: a step of one minute for 20 or 30 minutes.
        moments = [when(point["sampled_at"]) for point in points]
        assert moments[1] - moments[0] == timedelta(minutes=1), query
        shown = {when(p["sampled_at"]): p["activity_percent"] for p in points}
        assert shown[at] == 70.0, query
        assert [value for value in shown.values() if value is not None] == [70.0], query


def test_the_whole_life_of_a_request_that_never_ran_is_empty(org: Org) -> None:
    queued = GpuRequestFactory.create(project=org.project_a, to="queued")
    response = api_client(org.dev_a).get(url(queued), {"range": "life"})
    assert response.status_code == 200 and response.json() == []


@pytest.mark.parametrize(
    ("query", "field", "says"),
    [
        ({"range": "7w"}, "range", "Select a valid choice. 7w is not one of the available"),
        ({"range": "custom", "start": "2026-01-01T10:00"}, "", "needs both a From and a To"),
        (
            {"range": "custom", "start": "2026-01-02T10:00", "end": "2026-01-01T10:00"},
            "",
            "From must be before To.",
        ),
        (
            {"range": "custom", "start": "2025-01-01T10:00", "end": "2025-06-01T10:00"},
            "",
            "A custom range is at most 90 days long.",
        ),
        ({"range": "custom", "start": "yesterday", "end": "2026-01-01"}, "start", "valid date"),
        (
            {"range": "custom", "start": "2999-01-01T10:00", "end": "2999-01-02T10:00"},
            "",
            "From is in the future",
        ),
    ],
)
def test_a_bad_range_is_a_400_that_says_why(
    org: Org, running: Runner, query: dict[str, str], field: str, says: str
) -> None:
    request = running(minutes_ago=30)

    response = api_client(org.dev_a).get(url(request), query)

    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid"
    assert says in error["message"]
    if field:
        assert says in error["fields"][field]


def test_another_teams_request_is_404_whatever_the_range(org: Org, running: Runner) -> None:
    request = running(minutes_ago=60)
    sample(request, timezone.now() - timedelta(minutes=5), 55.0, 1234)
    outsider = api_client(org.dev_b)

    for query in ({"range": "24h"}, {"range": "life"}, {"range": "7w"}, {}):
        response = outsider.get(url(request), query)
        assert response.status_code == 404, (query, response.content)
        assert response.json()["error"]["code"] == "not_found"
        assert "55.0" not in response.content.decode()
    # Team A's lead sees it.
    assert api_client(org.lead_a).get(url(request), {"range": "24h"}).status_code == 200
