"""`make run`: the demo's processes run with debug pages off on plain http, and the terminal
shows what the fleet is doing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from portal.management.commands.run_portal import demo_environment, status_line
from scheduling.choices import RequestStatus
from scheduling.demo import seed_demo_fleet
from scheduling.models import Flavor
from tests.accounting.factories import make_request
from tests.support.personas import Org

KEY = {"SECRET_KEY": "demo-test-" + "x" * 40}


def test_demo_runs_without_debug_pages_on_plain_http() -> None:
    env = demo_environment(KEY, host="127.0.0.1")
    assert env["DEBUG"] == "false"
    assert env["ALLOWED_HOSTS"] == "127.0.0.1,localhost"
    for name in ("SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE", "SECURE_SSL_REDIRECT"):
        assert env[name] == "false"
    assert env["SECURE_HSTS_SECONDS"] == "0"


@pytest.mark.parametrize(
    ("host", "allowed"),
    [("localhost", "127.0.0.1,localhost"), ("192.0.2.7", "127.0.0.1,localhost,192.0.2.7"),
     ("0.0.0.0", "*")],
)  # fmt: skip
def test_demo_accepts_the_host_it_listens_on(host: str, allowed: str) -> None:
    assert demo_environment(KEY, host=host)["ALLOWED_HOSTS"] == allowed


def test_what_the_caller_sets_wins() -> None:
    env = demo_environment({**KEY, "DEBUG": "true", "ALLOWED_HOSTS": "demo.example"}, host="::")
    assert (env["DEBUG"], env["ALLOWED_HOSTS"]) == ("true", "demo.example")
    assert env["SECRET_KEY"] == KEY["SECRET_KEY"]


def test_status_line_counts_queued_running_and_reclaimed_today(org: Org, settings: Any) -> None:
    settings.TIME_ZONE = "UTC"
    seed_demo_fleet(teams={"vision": org.team_a, "speech": org.team_b})
    flavor = Flavor.objects.get(slug="l4-12g")
    now = datetime(2026, 3, 2, 12, 1, tzinfo=UTC)

    def request(status: str, *, finished_at: datetime | None = None) -> None:
        make_request(
            project=org.project_a, owner=org.dev_a, flavor=flavor, status=status,
            finished_at=finished_at,
        )  # fmt: skip

    for status in [RequestStatus.QUEUED] * 3 + [RequestStatus.RUNNING] * 5:
        request(status)
    for ago in (timedelta(hours=1), timedelta(hours=12), timedelta(days=1)):
        request(RequestStatus.RECLAIMED, finished_at=now - ago)
    request(RequestStatus.CANCELLED, finished_at=now)

    assert status_line(now) == "12:01 UTC queued 3 · running 5 · reclaimed today 2"
