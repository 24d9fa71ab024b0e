"""Series over a chosen time range: the points a chart draws (a step long enough to keep the
chart readable), GPU activity averaged per point, and a request's activity over its whole life.

A point covers [its moment, its moment + step); steps start at round moments in UTC, so the same
range always gives the same points.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import Count, Max, Min, QuerySet, Sum
from django.db.models.functions import TruncHour, TruncMinute
from django.utils import timezone

from scheduling.models import Allocation, GpuRequest, UtilisationSample

STEPS = [
    timedelta(minutes=minutes)
    for minutes in (1, 5, 15, 30, 60, 2 * 60, 3 * 60, 6 * 60, 12 * 60, 24 * 60)
]
MAX_POINTS = 150


@dataclass(frozen=True, slots=True)
class Window:
    """A chart's time range and the step between its points."""

    start: datetime
    end: datetime
    step: timedelta

    @property
    def points(self) -> list[datetime]:
        first = _floor(self.start, self.step)
        count = int((self.end - first) / self.step) + 1
        return [first + i * self.step for i in range(count)]

    @property
    def hours(self) -> float:
        return (self.end - self.start).total_seconds() / 3600

    def index_of(self, moment: datetime) -> int:
        return int((moment - _floor(self.start, self.step)) / self.step)

    @property
    def step_words(self) -> str:
        return step_words(self.step)

    def labels(self) -> list[str]:
        form = "%d %b %H:%M" if self.step < timedelta(days=1) else "%d %b"
        return [timezone.localtime(point).strftime(form) for point in self.points]


def step_words(step: timedelta) -> str:
    """A step in words: 15 minutes, hour, 6 hours, day."""
    minutes = int(step.total_seconds() // 60)
    if minutes % (24 * 60) == 0:
        return "day" if minutes == 24 * 60 else f"{minutes // (24 * 60)} days"
    if minutes % 60 == 0:
        return "hour" if minutes == 60 else f"{minutes // 60} hours"
    return "minute" if minutes == 1 else f"{minutes} minutes"


def _floor(moment: datetime, step: timedelta) -> datetime:
    seconds = step.total_seconds()
    return datetime.fromtimestamp(moment.timestamp() // seconds * seconds, tz=UTC)


def window_between(
    start: datetime, end: datetime, *, shortest_step: timedelta = STEPS[0]
) -> Window:
    """The range with the shortest step (not under `shortest_step`) that keeps the chart
    within MAX_POINTS points."""
    span = max(end - start, timedelta(minutes=1))
    step = next((s for s in STEPS if s >= shortest_step and span / s <= MAX_POINTS - 1), STEPS[-1])
    return Window(start=start, end=end, step=step)


def activity_by_point(
    samples: QuerySet[UtilisationSample], window: Window
) -> tuple[list[float | None], list[int | None]]:
    """Mean activity % and peak memory (MiB) of the samples in each point of the window; None
    where none was taken. Grouped by minute or hour in the database, then into points."""
    trunc = TruncHour if window.step >= timedelta(hours=1) else TruncMinute
    rows = (
        samples.filter(sampled_at__gte=window.start, sampled_at__lt=window.end)
        .annotate(at=trunc("sampled_at", tzinfo=UTC))
        .values("at")
        .annotate(total=Sum("activity_percent"), count=Count("pk"), memory=Max("memory_used_mib"))
        .values_list("at", "total", "count", "memory")
    )
    points = len(window.points)
    totals = [0.0] * points
    counts = [0] * points
    memory: list[int | None] = [None] * points
    for at, total, count, peak in rows:
        i = window.index_of(at)
        if not 0 <= i < points:
            continue
        totals[i] += total
        counts[i] += count
        if peak is not None:
            memory[i] = max(memory[i] or 0, peak)
    activity = [round(t / c, 1) if c else None for t, c in zip(totals, counts, strict=True)]
    return activity, memory


def activity_points(samples: QuerySet[UtilisationSample], window: Window) -> list[dict[str, Any]]:
    """The chart's points as records: each point's moment, mean activity % and peak memory
    (MiB), None where no sample was taken (the API's answer for a time range)."""
    activity, memory = activity_by_point(samples, window)
    return [
        {"sampled_at": moment, "activity_percent": mean, "memory_used_mib": peak}
        for moment, mean, peak in zip(window.points, activity, memory, strict=True)
    ]


def request_life(*, gpu_request: GpuRequest, now: datetime) -> tuple[datetime, datetime] | None:
    """From the request's first start to now while it holds GPUs, else to its last end; None
    if it never started."""
    allocations = Allocation.objects.filter(request=gpu_request, started_at__isnull=False)
    bounds = allocations.aggregate(first=Min("started_at"), last=Max("ended_at"))
    first_sample = UtilisationSample.objects.filter(allocation__request=gpu_request).aggregate(
        first=Min("sampled_at")
    )["first"]
    starts = [moment for moment in (bounds["first"], first_sample) if moment is not None]
    if not starts:
        return None
    live = allocations.filter(ended_at__isnull=True).exists()
    end = now if live else (bounds["last"] or gpu_request.finished_at or now)
    return min(starts), max(min(end, now), min(starts) + timedelta(minutes=1))


def request_activity_chart(*, gpu_request: GpuRequest, window: Window) -> dict[str, Any]:
    """The request's GPU activity (mean %, left axis) and GPU memory used (peak MiB, right
    axis) per point of the window, for the charts' script."""
    activity, memory = activity_by_point(
        UtilisationSample.objects.filter(allocation__request=gpu_request), window
    )
    return {
        "type": "line",
        "labels": window.labels(),
        "datasets": [
            {"label": "GPU activity % (mean)", "data": activity, "yAxisID": "percent"},
            {"label": "GPU memory used, MiB (peak)", "data": memory, "yAxisID": "memory"},
        ],
        "scales": {
            "percent": {
                "position": "left",
                "min": 0,
                "max": 100,
                "title": {"display": True, "text": "GPU activity %"},
            },
            "memory": {
                "position": "right",
                "beginAtZero": True,
                "title": {"display": True, "text": "Memory used (MiB)"},
                "grid": {"drawOnChartArea": False},
            },
        },
    }
