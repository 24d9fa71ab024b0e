"""The estimate headline on requests that waited (bench/estimates.py, `waited_score`).

The figure must not be flattered by requests that start at once (everyone guesses those) nor
by dropping requests that never start: those are misses whatever their estimate.
"""

from __future__ import annotations

from bench.estimates import DAY, T0, Estimate, waited_score

SUBMIT = T0 + 2 * DAY
HORIZON = T0 + 3 * DAY


def _est(forecast_wait: float | None) -> Estimate:
    at = None if forecast_wait is None else SUBMIT + forecast_wait
    return Estimate(SUBMIT, at, None, None, None, None)


def test_never_started_request_is_a_miss_not_dropped() -> None:
    estimates = {"hit": _est(3600.0), "never": _est(3600.0)}
    started = {"hit": SUBMIT + 3600.0}
    w = waited_score(estimates, started, "forecast_at", horizon=HORIZON)
    assert (w.scored, w.hits, w.never_started) == (2, 1, 1)
    assert w.share == 0.5


def test_start_after_the_horizon_counts_as_never_started() -> None:
    estimates = {"late": _est(2 * DAY)}
    started = {"late": SUBMIT + 2 * DAY}  # exactly as estimated, but after the horizon
    w = waited_score(estimates, started, "forecast_at", horizon=HORIZON)
    assert (w.scored, w.hits, w.never_started) == (1, 0, 1)


def test_requests_that_started_at_once_are_not_scored() -> None:
    estimates = {"now": _est(0.0), "waited": _est(1000.0)}
    started = {"now": SUBMIT, "waited": SUBMIT + 4000.0}
    w = waited_score(estimates, started, "forecast_at", horizon=HORIZON)
    assert (w.scored, w.hits, w.late, w.early) == (1, 0, 1, 0)
    assert w.share == 0.0


def test_misses_are_split_by_direction_and_missing_estimate() -> None:
    estimates = {
        "early": _est(10_000.0),
        "late": _est(1_000.0),
        "none": _est(None),
        "within": _est(4_000.0),
    }
    started = {rid: SUBMIT + 4_500.0 for rid in estimates}
    w = waited_score(estimates, started, "forecast_at", horizon=HORIZON)
    assert (w.scored, w.hits, w.early, w.late, w.no_estimate) == (4, 1, 1, 1, 1)


def test_warm_up_day_is_not_scored() -> None:
    estimates = {"warm": Estimate(T0 + 60.0, T0 + 600.0, None, None, None, None)}
    w = waited_score(estimates, {}, "forecast_at", horizon=HORIZON)
    assert w.scored == 0
    assert w.share == 0.0
