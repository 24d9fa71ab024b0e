"""`gpuctl get` reads a queued request's estimated start as one line, in local time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpuctl.cli import start_line


def iso(moment: datetime) -> str:
    return moment.astimezone().isoformat()


def test_start_line_gives_the_estimate_and_its_interval_in_local_time() -> None:
    at = datetime.now().astimezone().replace(hour=14, minute=20, second=0, microsecond=0)
    line = start_line(
        {
            "estimated_start_at": iso(at),
            "estimate_low_at": iso(at - timedelta(minutes=15)),
            "estimate_high_at": iso(at + timedelta(minutes=50)),
        }
    )
    assert line == "around 14:20, between 14:05 and 15:10"


def test_start_line_reads_api_times_and_says_not_before_without_a_high_bound() -> None:
    at = datetime.now().astimezone().replace(hour=9, minute=0, second=0, microsecond=0)
    utc = at.astimezone(UTC).isoformat().replace("+00:00", "Z")  # as the API writes it
    line = start_line({"estimated_start_at": utc, "estimate_low_at": utc, "estimate_high_at": None})
    assert line == "around 09:00"
    later = at + timedelta(days=2)
    line = start_line(
        {"estimated_start_at": iso(later), "estimate_low_at": iso(at), "estimate_high_at": None}
    )
    assert line == f"around {later.strftime('%a')} 09:00, not before 09:00"
