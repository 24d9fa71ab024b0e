"""The reclamation rules on synthetic series: time is passed in, nothing sleeps."""

from __future__ import annotations

import pytest

from scheduling.reclaim_rules import (
    CrashSignature,
    crash_retry_delay_seconds,
    crashed_the_same_way,
    idle_verdict,
    stuck_pending,
    timeout_stage,
)

WINDOW, WARNING, THRESHOLD = 1800.0, 600.0, 5.0


def series(start: float, end: float, step: float, activity: float) -> list[tuple[float, float]]:
    return [(start + i * step, activity) for i in range(int((end - start) / step) + 1)]


def verdict(samples: list[tuple[float, float]], now: float, **kwargs: float | None) -> object:
    arguments: dict[str, float | None] = {
        "now": now,
        "started_at": 0.0,
        "threshold_percent": THRESHOLD,
        "window_seconds": WINDOW,
        "warning_seconds": WARNING,
        "warned_at": None,
    }
    arguments.update(kwargs)
    return idle_verdict(samples, **arguments)  # type: ignore[arg-type]


def test_busy_work_is_active() -> None:
    result = verdict(series(0, 3600, 60, 80.0), now=3600)
    assert result.stage == "active"  # type: ignore[attr-defined]


def test_no_samples_is_unobserved_never_reclaimed() -> None:
    assert verdict([], now=10_000).stage == "unobserved"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("idle_minutes", "warned_minutes_ago", "stage"),
    [
        (10, None, "active"),  # idle 10 of 30 minutes
        (20, None, "warn"),  # 10 minutes before the window ends
        (30, None, "warn"),  # the window is over but nobody was warned yet: warn first
        (30, 5, "warn"),  # warned 5 of the 10 minutes ago
        (30, 10, "reclaim"),
        (45, 25, "reclaim"),
    ],
)
def test_idle_ladder_warns_before_it_reclaims(
    idle_minutes: int, warned_minutes_ago: int | None, stage: str
) -> None:
    busy_until = 1000.0
    now = busy_until + idle_minutes * 60
    samples = series(0, busy_until - 60, 60, 70.0) + series(busy_until, now, 60, 1.0)
    warned_at = None if warned_minutes_ago is None else now - warned_minutes_ago * 60
    result = verdict(samples, now=now, warned_at=warned_at)
    assert result.stage == stage  # type: ignore[attr-defined]


def test_one_busy_sample_resets_the_idle_clock() -> None:
    samples = series(0, 2400, 60, 1.0) + [(2460.0, 40.0)] + series(2520, 2700, 60, 1.0)
    result = verdict(samples, now=2700, warned_at=2000)
    assert result.stage == "active"  # type: ignore[attr-defined]
    assert result.idle_since == 2520  # type: ignore[attr-defined]


def test_work_idle_from_the_start_counts_from_its_start() -> None:
    result = verdict(series(120, 1500, 60, 0.0), now=1500, started_at=100.0)
    assert result.idle_seconds == 1400  # type: ignore[attr-defined]
    assert result.stage == "warn"  # type: ignore[attr-defined]


def test_exemption_suspends_the_ladder() -> None:
    samples = series(0, 4000, 60, 0.0)
    result = verdict(samples, now=4000, warned_at=3000, exempt_until=5000)
    assert result.stage == "active"  # type: ignore[attr-defined]
    result = verdict(samples, now=4000, warned_at=3000, exempt_until=3500)
    assert result.stage == "reclaim"  # type: ignore[attr-defined]


def test_evidence_names_the_window_and_the_peak() -> None:
    samples = series(0, 2000, 60, 3.0)
    result = verdict(samples, now=2000, warned_at=1000)
    evidence = result.evidence(threshold=THRESHOLD, window_seconds=WINDOW)  # type: ignore[attr-defined]
    assert evidence["peak_activity_percent"] == 3.0
    assert evidence["samples"] == len(samples)


@pytest.mark.parametrize(
    ("elapsed", "stage"), [(100, "within"), (3000, "warn"), (3600, "stop"), (9999, "stop")]
)
def test_timeout_warns_then_stops(elapsed: float, stage: str) -> None:
    assert (
        timeout_stage(started_at=0, max_runtime_seconds=3600, warning_seconds=900, now=elapsed)
        == stage
    )


def test_stuck_pending_after_the_timeout() -> None:
    assert not stuck_pending(launched_at=0, pending_timeout_seconds=600, now=599)
    assert stuck_pending(launched_at=0, pending_timeout_seconds=600, now=600)


@pytest.mark.parametrize(
    ("crashes", "delay"),
    [(0, 0.0), (1, 60.0), (2, 120.0), (3, 240.0), (5, 960.0), (6, 1800.0), (40, 1800.0)],
)
def test_crash_retries_back_off_exponentially_up_to_the_cap(crashes: int, delay: float) -> None:
    assert crash_retry_delay_seconds(crashes=crashes, base_seconds=60, max_seconds=1800) == delay


OOM = CrashSignature("registry.example.com/ml/train:1", 137, "OOMKilled")


@pytest.mark.parametrize(
    ("previous", "current", "same"),
    [
        (None, OOM, False),  # a first crash is retried
        (OOM, OOM, True),
        (OOM, CrashSignature(OOM.image, 1, "Error"), False),  # another exit
        (OOM, CrashSignature("registry.example.com/ml/train:2", 137, "OOMKilled"), False),
        (OOM, CrashSignature(OOM.image, 137, ""), False),  # the reason differs
        # Nothing seen of either exit proves nothing.
        (CrashSignature(OOM.image, None, ""), CrashSignature(OOM.image, None, ""), False),
    ],
)
def test_only_the_same_image_crashing_the_same_way_again_is_a_repeat(
    previous: CrashSignature | None, current: CrashSignature, same: bool
) -> None:
    assert crashed_the_same_way(previous, current) is same


def test_a_crash_is_described_by_its_reason_and_exit_code() -> None:
    assert OOM.describe() == "OOMKilled (exit code 137)"
    assert CrashSignature("x", 1, "").describe() == "exit code 1"
    assert CrashSignature("x", None, "").describe() == "an unknown exit"
