"""A real Celery worker process (with embedded beat) against the test database and a real Redis."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

from django.conf import settings
from django.db import connection
from kombu import pools as kombu_pools

ROOT = Path(settings.BASE_DIR)


def test_database_url() -> str:
    """The URL of the database the test run created, for processes started by the tests."""
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    port = db.get("PORT") or 5432
    return f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{port}/{db['NAME']}"


class WorkerProcess:
    def __init__(
        self, redis_url: str, extra_env: dict[str, str] | None = None, *, beat: bool = True
    ) -> None:
        self.redis_url = redis_url
        self.beat = beat
        self.started_at = 0.0
        self.ready_offset = 0
        self.log_path = Path(tempfile.mkdtemp()) / "worker.log"
        self.log_path.touch()
        self.beat_file = Path(tempfile.mkdtemp()) / "beat-schedule"
        self.marks_dir = Path(tempfile.mkdtemp())  # see tests/support/task_marks.py
        self.env = {
            **os.environ,
            "DATABASE_URL": test_database_url(),
            "REDIS_URL": redis_url,
            "CELERY_BROKER_URL": redis_url,
            "CELERY_TASK_ALWAYS_EAGER": "false",
            "CLUSTER_BACKEND": "simulated",
            "SIMULATION_SPEED": "60",
            "SCHEDULING_CYCLE_SECONDS": "1",
            "WORKLOAD_SYNC_SECONDS": "0.5",
            "STUCK_TRANSITION_SECONDS": "3",
            "CELERY_VISIBILITY_TIMEOUT_SECONDS": "5",
            **(extra_env or {}),
            "TASK_MARKS_DIR": str(self.marks_dir),
        }
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0, *, wait: bool = True) -> None:
        """Start the worker; with `wait`, return once it consumes (see `is_ready`)."""
        command = [
            sys.executable, "-m", "celery", "-A", "portal", "worker",
            *(["--beat", "--schedule", str(self.beat_file)] if self.beat else []),
            "--loglevel", "info", "--concurrency", "2",
            "--without-gossip", "--without-mingle",
            "--include", "tests.support.task_marks",
        ]  # fmt: skip
        for mark in self.marks_dir.iterdir():  # left by a killed run: none of them runs now
            mark.unlink()
        offset = self.ready_offset = self.log_path.stat().st_size
        self.started_at = time.monotonic()
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                command,
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: kill() takes the pool with it
            )
        if not wait:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if " ready." in self.log_path.read_text(errors="replace")[offset:]:
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.2)
        raise RuntimeError(f"the worker did not start:\n{self.output()[-4000:]}")

    def is_ready(self) -> bool:
        """The worker started last has connected and consumes tasks."""
        with self.log_path.open("rb") as log:
            log.seek(self.ready_offset)
            return b" ready." in log.read()

    def running_tasks(self) -> list[str]:
        """Names of the tasks this worker's pool is executing now (started, not ended)."""
        return sorted(mark.name.partition("@")[0] for mark in self.marks_dir.iterdir())

    def kill(self) -> list[str]:
        """SIGKILL the worker and its pool, as a node failure would.

        Returns the names of the tasks the kill cut short: a SIGKILLed process runs no further
        code, so the marks left behind are exactly the tasks that had started and not ended.
        """
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        return self.running_tasks()

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")


@contextmanager
def supervised(worker: WorkerProcess, *, poll_seconds: float = 0.5) -> Iterator[list[float]]:
    """Restart the worker whenever it exits, as Kubernetes (`restartPolicy: Always`) and the
    compose file (`restart: unless-stopped`) do in production. Yields the restart times.

    Needed for broker outages: when Redis drops the connection while the worker holds an
    unacknowledged (late-ack) task, kombu's restore of that message can fail and the worker
    exits with "Unrecoverable error" instead of reconnecting. The message itself is not lost:
    it is redelivered after the visibility timeout.
    """
    restarts: list[float] = []
    stopping = threading.Event()

    def watch() -> None:
        while not stopping.wait(poll_seconds):
            if worker.process is not None and worker.process.poll() is not None:
                restarts.append(time.monotonic())
                worker.start(wait=False)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield restarts
    finally:
        stopping.set()
        watcher.join()


def use_broker(app: Any, broker_url: str) -> None:
    """Point the test process's Celery app at `broker_url` with fresh connection pools.

    Closing the app's pool alone leaves it closed for good ("Acquire on closed pool"): every
    task the test process then queued was dropped and only the worker's beat moved work.
    """
    app.conf.update(broker_url=broker_url)
    cast(Any, app.pool).force_close_all()
    app._pool = None
    app.amqp._producer_pool = None
    kombu_pools.reset()


@contextmanager
def celery_worker(redis_url: str, **extra_env: str) -> Iterator[WorkerProcess]:
    """Start a worker; tasks the test process queues go to it through Redis, not inline."""
    with worker_to_start(redis_url, **extra_env) as worker:
        worker.start()
        yield worker


@contextmanager
def worker_to_start(redis_url: str, **extra_env: str) -> Iterator[WorkerProcess]:
    """As `celery_worker`, but the test starts the worker (`worker.start()`): what it queues
    before that waits in Redis, so a backlog can be built up before any of it moves."""
    from portal.celery import app

    worker = WorkerProcess(redis_url, extra_env)
    previous: dict[str, Any] = {
        "task_always_eager": app.conf.task_always_eager,
        "broker_url": app.conf.broker_url,
    }
    app.conf.update(task_always_eager=False)
    use_broker(app, redis_url)
    try:
        yield worker
    finally:
        worker.stop()
        app.conf.update(previous)
        use_broker(app, previous["broker_url"])
