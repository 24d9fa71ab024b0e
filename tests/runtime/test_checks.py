"""The start-up check that keeps workloads off the portal's site."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
from django.conf import settings

from runtime.checks import check_workload_origin, workload_origin_problems


@pytest.mark.parametrize(
    ("workload_domain", "portal_hosts", "refused"),
    [
        ("workloads.example.org", ["gpu.example.com"], False),
        ("workloads.example.org", ["gpu.example.org"], False),  # a sibling, not a parent
        ("workloads.localhost:8000", ["127.0.0.1", "localhost"], False),
        ("example.org", ["gpu.example.org"], True),  # a parent of the portal's host
        ("gpu.example.org", ["gpu.example.org"], True),  # the portal's host itself
        ("Example.ORG.", ["gpu.example.org"], True),
        ("localhost:8001", ["localhost"], True),  # another port is the same cookie site
        ("example.org", [".example.org"], True),
        ("workloads.example.org", ["*"], False),
    ],
)
def test_a_workload_domain_on_the_portals_site_is_refused(
    workload_domain: str, portal_hosts: list[str], refused: bool
) -> None:
    problems = workload_origin_problems(
        workload_domain=workload_domain, portal_hosts=portal_hosts, cookie_domains=(None, None)
    )
    assert bool(problems) is refused, problems


def test_the_portals_cookies_stay_host_only(settings: Any) -> None:
    assert check_workload_origin() == []
    settings.SESSION_COOKIE_DOMAIN = ".example.org"
    (error,) = check_workload_origin()
    assert error.id == "runtime.E001" and "SESSION_COOKIE_DOMAIN" in error.msg
    settings.SESSION_COOKIE_DOMAIN = None
    settings.PORTAL_URL = "https://portal.workloads.localhost"
    (error,) = check_workload_origin()
    assert "parent" in error.msg


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"WORKLOAD_DOMAIN": "localhost"}, "WORKLOAD_DOMAIN 'localhost' is the portal's host"),
        # The old setting put workloads under /w/ on the portal's host: said, not ignored.
        ({"WORKLOAD_BASE_URL": "https://gpu.example.com/w/"}, "WORKLOAD_BASE_URL is gone"),
    ],
)
def test_no_process_starts_with_workloads_on_the_portals_host(
    variables: dict[str, str], message: str
) -> None:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings", **variables}
    started = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        env=env,
        cwd=settings.BASE_DIR,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert started.returncode != 0
    assert message in started.stderr
