"""Followed logs do not occupy the web tier: pages and the workload auth check stay fast.

The web server as `make run` and the manifests start it (gunicorn with uvicorn workers,
`portal/gunicorn_config.py`), with ONE worker process, on the test database and a real Redis.
FOLLOWERS clients follow a running request's log, each a real long-lived HTTP stream; while
they all stay open, a signed-in person's request list and a notebook's auth check must answer
at once. Under the former web tier a followed log held a sync worker for the whole stream (one
worker: the first follower stalled everything else); under ASGI with a sync iterator Django
would collect the whole stream before sending a byte. Either way this test fails.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import cast

import pytest
from django.conf import settings
from django.test import Client
from django.utils import timezone
from knox.models import AuthToken

from portal.management.commands.run_portal import web_command
from runtime.cluster.simulated import LOG_LINE_SECONDS, SimulatedCluster
from runtime.models import SimulatedWorkload
from runtime.services import execution, streams
from runtime.services.workload_access import COOKIE_NAME, cookie_value
from scheduling.choices import RequestStatus
from scheduling.models import GpuRequest
from scripts.testbed.ports import free_port
from tests.scheduling.conftest import Fleet
from tests.support.factories import GpuRequestFactory
from tests.support.personas import Org
from tests.support.services import wait_for_port
from tests.support.worker import test_database_url as database_url

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

ROOT = Path(settings.BASE_DIR)
FOLLOWERS = 12
PAGE_CALLS = 15
# A page waits seconds at most on this shared machine; a stalled one waits for a stream to end.
PAGE_TIMEOUT_SECONDS = 5.0
PAGE_LIMIT_SECONDS = 2.0
FIRST_LINE_SECONDS = 15.0


@dataclass
class Follower:
    """One client following a log on its own connection, in its own thread."""

    port: int
    path: str
    token: str
    lines: list[tuple[float, str]] = field(default_factory=list)
    status: int | None = None
    error: str = ""
    first_line: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        try:
            connection.request("GET", self.path, headers={"Authorization": f"Token {self.token}"})
            response = connection.getresponse()
            self.status = response.status
            while line := response.readline():
                self.lines.append((time.monotonic(), line.decode()))
                self.first_line.set()
        except OSError as error:  # the server stopping at the end of the test
            self.error = str(error)
        finally:
            self.first_line.set()
            connection.close()


def running_request(org: Org, fleet: Fleet) -> GpuRequest:
    """A notebook of dev_a's that the simulated cluster runs, started a while ago."""
    request = cast(
        GpuRequest,
        GpuRequestFactory(
            to="submitted", project=org.project_a, flavor=fleet.l4_6g, kind="notebook"
        ),
    )
    begin = timezone.now() - timedelta(seconds=LOG_LINE_SECONDS * 3)
    SimulatedWorkload.objects.filter(request_key=str(request.pk)).update(
        created_at=begin - timedelta(seconds=5),
        starts_at=begin,
        ends_at=timezone.now() + timedelta(hours=1),
        fails=False,
    )
    execution.sync_workloads(backend=SimulatedCluster())
    request.refresh_from_db()
    assert request.status == RequestStatus.RUNNING, request.status
    return request


@pytest.fixture
def web_server(redis_url: str, tmp_path: Path) -> Iterator[int]:
    """One gunicorn worker process, started the way `make run` starts it."""
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "REDIS_URL": redis_url,
        "CELERY_BROKER_URL": redis_url,
        "DEBUG": "false",
        "SECRET_KEY": settings.SECRET_KEY,  # the test's sessions are signed with it
        "ALLOWED_HOSTS": "127.0.0.1",
        "SECURE_SSL_REDIRECT": "false",
        "CONN_MAX_AGE": "0",
        "DATABASE_POOL_MAX_SIZE": "4",  # as deployed, on PostgreSQL
        "CLUSTER_BACKEND": "simulated",
        "WORKLOAD_LOG_POLL_SECONDS": "0.5",
        "WORKLOAD_LOG_FOLLOW_SECONDS": "120",
        "STREAMS_PER_USER": str(FOLLOWERS),
    }
    # DEBUG=false serves the hashed static files, as `make run` does after collecting them.
    subprocess.run(  # noqa: S603 - our own manage.py, fixed arguments
        [sys.executable, "manage.py", "collectstatic", "--noinput", "-v", "0"],
        cwd=ROOT,
        env=env,
        check=True,
    )
    log = tmp_path / "web.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            web_command(address=f"127.0.0.1:{port}", workers=1),
            cwd=ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for_port(port, timeout=60)
        yield port
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        print(log.read_text(errors="replace")[-3000:])


def timed_get(port: int, path: str, cookie: str) -> tuple[int, float]:
    began = time.monotonic()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=PAGE_TIMEOUT_SECONDS)
    try:
        connection.request("GET", path, headers={"Cookie": cookie})
        response = connection.getresponse()
        response.read()
        return response.status, time.monotonic() - began
    finally:
        connection.close()


def test_pages_and_the_auth_check_answer_at_once_while_logs_are_followed(
    org: Org, fleet: Fleet, web_server: int
) -> None:
    request = running_request(org, fleet)
    _, token = AuthToken.objects.create(user=org.dev_a)
    browser = Client()
    browser.force_login(org.dev_a)
    session = f"sessionid={browser.cookies[settings.SESSION_COOKIE_NAME].value}"
    # The auth check reads the workload's own cookie, never the portal's session.
    workload = f"{COOKIE_NAME}={cookie_value(user=org.dev_a, request_id=request.pk)}"
    port = web_server
    assert timed_get(port, "/requests/", session)[0] == 200  # warm: the first call imports

    path = f"/api/v1/requests/{request.pk}/logs/?tail=2&follow=1"
    followers = [Follower(port=port, path=path, token=token) for _ in range(FOLLOWERS)]
    threads = [threading.Thread(target=f.run, daemon=True) for f in followers]
    for thread in threads:
        thread.start()
    # Every stream streams: its first lines arrive while the others are open.
    for follower in followers:
        assert follower.first_line.wait(FIRST_LINE_SECONDS), "a follower got no line"
        assert follower.status == 200 and follower.lines, follower.error

    pages = [timed_get(port, "/requests/", session) for _ in range(PAGE_CALLS)]
    checks = [
        timed_get(port, f"/auth/workloads/{request.pk}/", workload) for _ in range(PAGE_CALLS)
    ]
    assert {status for status, _ in pages} == {200}
    assert {status for status, _ in checks} == {200}
    slowest = max(seconds for _, seconds in pages + checks)
    assert slowest < PAGE_LIMIT_SECONDS, f"slowest page {slowest:.2f} s with {FOLLOWERS} followers"
    # ... and the streams are still open, none ended or failed meanwhile.
    assert all(thread.is_alive() for thread in threads)
    assert not any(follower.error for follower in followers)


def test_one_stream_over_the_cap_is_429_from_the_server(
    org: Org, fleet: Fleet, web_server: int
) -> None:
    """The cap holds across the server's requests (counted in Redis), with the API's shape."""
    request = running_request(org, fleet)
    _, own = AuthToken.objects.create(user=org.dev_a)
    path = f"/api/v1/requests/{request.pk}/logs/?tail=1&follow=1"
    followers = [Follower(port=web_server, path=path, token=own) for _ in range(FOLLOWERS)]
    threads = [threading.Thread(target=f.run, daemon=True) for f in followers]
    for thread in threads:
        thread.start()
    for follower in followers:
        assert follower.first_line.wait(FIRST_LINE_SECONDS) and follower.status == 200
    connection = http.client.HTTPConnection("127.0.0.1", web_server, timeout=10)
    connection.request("GET", path, headers={"Authorization": f"Token {own}"})
    response = connection.getresponse()
    body = json.loads(response.read())
    assert response.status == 429, body
    assert response.getheader("Retry-After") == str(streams.SLOT_LEASE_SECONDS)
    assert body["error"]["code"] == "too_many_streams"
