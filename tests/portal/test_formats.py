"""The template builtins every page writes with: times with the zone, GPUs, durations, words."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from portal.templatetags.portal_format import (
    duration,
    format_when,
    gpus,
    label,
    object_noun,
    sharing_mode,
)


def test_times_carry_the_portals_zone() -> None:
    moment = datetime(2026, 12, 4, 17, 8, 30, tzinfo=UTC)
    assert format_when(moment) == "2026-12-04 17:08 UTC"
    assert format_when(moment, seconds=True) == "2026-12-04 17:08:30 UTC"
    assert format_when(None) == "–"


def test_another_time_zone_moves_the_clock_and_names_the_zone() -> None:
    from django.utils import timezone

    moment = datetime(2026, 7, 1, 12, 0, tzinfo=UTC)
    with timezone.override("Europe/Berlin"):
        assert format_when(moment) == "2026-07-01 14:00 CEST"


@pytest.mark.parametrize(
    ("count", "text"), [(1, "1 GPU"), (2, "2 GPUs"), (0.5, "0.5 GPU"), (None, "–")]
)
def test_gpu_counts_read_as_words(count: object, text: str) -> None:
    assert gpus(count) == text


@pytest.mark.parametrize(
    ("seconds", "text"), [(90, "90 s"), (2700, "45 min"), (7200, "2 h"), (None, "–")]
)
def test_durations_have_units(seconds: object, text: str) -> None:
    assert duration(seconds) == text


def test_codes_read_as_words() -> None:
    assert label("team_lead") == "Team lead"
    assert label("reclaim.idle_warning") == "Reclaim: idle warning"
    assert sharing_mode("mig") == "MIG profiles"
    assert object_noun("GpuRequest") == "Request"
    assert object_noun("ApprovalRule") == "Approval rule"
