"""Playwright with the system's Chromium (never downloaded) against pytest-django's live_server."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from scheduling.models import GpuRequest
from scheduling.services.notifications import notify
from tests.support.demo_work import seed_demo_at_work

CHROMIUM = Path("/usr/bin/chromium")
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def pytest_configure(config: Any) -> None:
    config.addinivalue_line("markers", "browser: drives a real headless Chromium (Playwright)")


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{CHROMIUM} is missing on CI: install Debian's chromium package")
        pytest.skip(f"browser tests need {CHROMIUM} (apt-get install chromium); skipped locally")
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=LAUNCH_ARGS
        )
        yield chromium
        chromium.close()


@pytest.fixture
def demo(transactional_db: None) -> None:
    """The seeded demo, with an inbox for each persona (the history writes none)."""
    call_command("seed_demo", stdout=io.StringIO())
    users = {user.username: user for user in get_user_model().objects.all()}
    request = GpuRequest.objects.filter(owner=users["alice"]).order_by("-pk").first()
    pk = request.pk if request is not None else 1
    for username, subject, event in (
        ("bob", f"GPU request {pk} needs your approval", "request.pending_approval"),
        ("alice", f"GPU request {pk} is idle and will be reclaimed", "reclaim.idle_warning"),
        ("alice", f"GPU request {pk} approved", "request.approved"),
        ("root", f"GPU request {pk} was reclaimed", "reclaim.idle"),
        ("fiona", "Budget of Vision at 80 %", "budget.alert"),
    ):
        notify(
            users=[users[username]],
            subject=subject,
            body="A long explanation-without-spaces-" + "x" * 80 + " that must wrap on a phone.",
            event={"type": event, "request": pk, "budget": 1},
        )


@pytest.fixture
def demo_at_work(transactional_db: None) -> None:
    """The demo a few minutes into its day: work running, queued and waiting for a lead."""
    seed_demo_at_work()


@pytest.fixture
def page_at(browser: Any) -> Iterator[Any]:
    # The portal's CSP admits only its own nonce'd scripts; axe is injected by the test.
    context = browser.new_context(bypass_csp=True, viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(20_000)
    yield page
    context.close()
