"""The template builtins every page writes with: times with the zone, GPUs, durations, words."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from types import SimpleNamespace

import pytest

from portal.templatetags.portal_format import (
    duration,
    flavor_size,
    format_money,
    format_when,
    gpu_eq,
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


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (Decimal("1.0000"), "1 GPU-eq"),
        (Decimal("0.4286"), "0.43 GPU-eq"),
        (Decimal("0.5000"), "0.5 GPU-eq"),
        (2.0, "2 GPU-eq"),
        (None, "–"),
    ],
)
def test_gpu_equivalents_have_two_decimals_at_most(value: object, text: str) -> None:
    assert gpu_eq(value) == text


def test_a_whole_card_reads_as_a_gpu_and_a_share_as_its_gpu_equivalents() -> None:
    whole = SimpleNamespace(kind="whole", gpu_equivalent=Decimal("1.0000"))
    mig = SimpleNamespace(kind="mig", gpu_equivalent=Decimal("0.1429"))
    assert flavor_size(whole) == "1 whole GPU"
    assert flavor_size(mig) == "0.14 GPU-eq"


@pytest.mark.parametrize(
    ("amount", "text"),
    [(Decimal("2.5000"), "2.50"), (Decimal("0.0125"), "0.0125"), (Decimal("3"), "3.00")],
)
def test_money_keeps_its_cents_and_no_trailing_zeros_beyond(amount: Decimal, text: str) -> None:
    assert format_money(amount) == text
