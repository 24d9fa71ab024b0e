"""`gpuctl get` reads a queued request's estimated start as one line, in local time."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client
from django.urls import reverse

from gpuctl.cli import start_line
from scheduling.services import estimates
from scheduling.templatetags.estimate_tags import wait_words
from tests.cli.conftest import Gpuctl
from tests.scheduling.test_estimates import busy_then_waiting, whole_pool
from tests.support.personas import Org


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


@pytest.mark.integration
def test_gpuctl_get_shows_when_a_queued_request_will_likely_start(
    logged_in: Callable[[str], Gpuctl], org: Org
) -> None:
    _, waiting = busy_then_waiting(org, whole_pool(org))
    estimates.refresh_start_estimates()
    waiting.refresh_from_db()
    assert waiting.estimated_start_at is not None
    gpuctl = logged_in("dev_a")
    as_table = gpuctl("get", str(waiting.pk))
    assert as_table.returncode == 0, as_table.stderr
    line = next(row for row in as_table.stdout.splitlines() if row.startswith("likely_start "))
    assert line.split(None, 1)[1].startswith("around ")
    as_json = json.loads(gpuctl("get", str(waiting.pk), "-o", "json").stdout)
    assert as_json["estimated_start_at"] is not None and "likely_start" not in as_json


def test_gpuctl_what_if_says_per_flavor_when_a_request_would_start(
    logged_in: Callable[[str], Gpuctl], org: Org
) -> None:
    busy, free = whole_pool(org), whole_pool(org)
    busy_then_waiting(org, busy)
    gpuctl = logged_in("dev_a")
    result = gpuctl("what-if", "--project", org.project_a.slug, "--gpus", "4")
    assert result.returncode == 0, result.stderr
    rows = {
        name: line.split(name, 1)[1].strip()
        for line in result.stdout.splitlines()
        for name in (busy.name, free.name)
        if line.startswith(name)
    }
    assert rows[free.name] == "now"
    assert rows[busy.name].startswith("in about ")
    as_json = json.loads(
        gpuctl("what-if", "--project", str(org.project_a.pk), "--gpus", "4", "-o", "json").stdout
    )
    waits = {row["flavor_name"]: row["wait_seconds"] for row in as_json}
    assert waits[free.name] == 0.0 and waits[busy.name] > 0


@pytest.mark.integration
def test_gpuctl_what_if_and_the_request_form_give_the_same_answer(
    logged_in: Callable[[str], Gpuctl], org: Org
) -> None:
    busy, free = whole_pool(org), whole_pool(org)
    busy_then_waiting(org, busy)
    gpuctl = logged_in("dev_a")
    asked = gpuctl("what-if", "--project", org.project_a.slug, "--gpus", "4", "-o", "json")
    from_cli = {
        row["flavor_name"]: wait_words(row["wait_seconds"]) for row in json.loads(asked.stdout)
    }
    client = Client()
    client.force_login(org.dev_a)
    page = client.get(
        reverse("gpu-request-what-if-page"), {"project": org.project_a.pk, "gpu_count": 4}
    ).content.decode()
    on_the_form = dict(re.findall(r'data-flavor="[^"]+">([^<]+?) <strong>([^<]+)</strong>', page))
    assert on_the_form == from_cli
    assert from_cli[free.name] == "now" and from_cli[busy.name] != "now"


@pytest.mark.integration
def test_gpuctl_get_shows_a_just_approved_request_its_likely_start(
    logged_in: Callable[[str], Gpuctl], org: Org
) -> None:
    _, waiting = busy_then_waiting(org, whole_pool(org))
    assert waiting.estimated_start_at is None  # no refresh since it entered the queue
    as_table = logged_in("dev_a")("get", str(waiting.pk))
    assert as_table.returncode == 0, as_table.stderr
    line = next(row for row in as_table.stdout.splitlines() if row.startswith("likely_start "))
    assert line.split(None, 1)[1].startswith("around ")
