"""The web tier under followed logs: page and workload-auth latency with 0 and N followers.

    python -m bench.streams [--followers N] [--calls C] [--workers W]      (make bench-streams)

1. Recreates the database at BENCH_STREAMS_DATABASE_URL (default `portal_benchstreams`; a name
   that does not start with `portal_bench` is refused),
   migrates it and seeds the demo organisation and fleet, plus one developer per
   STREAMS_PER_USER followers, each with a notebook that the simulated cluster runs (submitted,
   admitted and launched through the services, then synced to running).
2. Starts the web tier as deployed (`portal/gunicorn_config.py`: gunicorn with uvicorn workers,
   W processes, one per core by default) on a free loopback port, in production mode, with
   Redis at BENCH_STREAMS_REDIS_URL and the default poll interval of a followed log.
3. Baseline, no one following: C calls of the request list page (`/requests/`, signed in) and
   C calls of a notebook's auth check (`/auth/workloads/<id>/`), from two clients at once,
   each call on a new connection, one after the other.
4. Opens N followers (`GET /api/v1/requests/<id>/logs/?follow=1`, each a real HTTP stream on its
   own connection, its own thread, at most STREAMS_PER_USER per person), waits until each has
   its first lines, measures the server's CPU over 10 s with only the streams open, then the
   same calls again while all N stay open, and checks that every stream is still open
   afterwards.

It prints one JSON line per figure: p50, p99 and max in ms of each kind of call, with the number
of followers. Client, server and database share the machine's cores; the followers' polls (each
a database read every WORKLOAD_LOG_POLL_SECONDS) are part of the load, as in production.
"""

from __future__ import annotations

import argparse
import http.client
import os
import signal
import statistics
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from bench.figures import emit, recreate_database
from scripts.testbed.ports import free_port

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_URL = "postgres://portal:portal@127.0.0.1:5432/portal_benchstreams"
DEFAULT_REDIS = "redis://127.0.0.1:6379/13"
P99_TARGET_MS = 200
STREAMS_PER_USER = 4
SECRET_KEY = "bench-streams-only-" + "x" * 40
FIRST_LINES_SECONDS = 60.0
IDLE_WINDOW_SECONDS = 10.0


def server_environment(url: str, redis_url: str) -> dict[str, str]:
    """What both this process and the web server run with: production mode on loopback."""
    return {
        "DATABASE_URL": url,
        "REDIS_URL": redis_url,
        "CELERY_BROKER_URL": redis_url,
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "DEBUG": "false",
        "SECRET_KEY": SECRET_KEY,
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "SECURE_SSL_REDIRECT": "false",
        "CLUSTER_BACKEND": "simulated",
        "STREAMS_PER_USER": str(STREAMS_PER_USER),
        # As the web tier is deployed (deploy/manifests/40-web.yaml): a pool per process.
        "DATABASE_POOL_MAX_SIZE": "8",
        "DEMO_HISTORY_DAYS": "0",
    }


@dataclass(frozen=True, slots=True)
class Person:
    token: str
    session: str
    notebook_id: int
    #: The workload's own cookie (what /connect/ sets on the workload's host): the auth check
    #: reads it, never the portal's session.
    workload_cookie: str


def seed(people: int) -> list[Person]:
    """The demo organisation and fleet; `people` developers, each with a running notebook."""
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.utils import timezone
    from knox.models import AuthToken

    from accounting.demo import seed_demo_prices
    from runtime.cluster.simulated import LOG_LINE_SECONDS, SimulatedCluster
    from runtime.models import SimulatedWorkload
    from runtime.services import execution
    from runtime.services.workload_access import cookie_value
    from scheduling.choices import RequestStatus
    from scheduling.demo import seed_demo_fleet
    from scheduling.models import Flavor, GpuRequest, Quota
    from scheduling.services import cycle
    from scheduling.services.requests import GpuRequestSpec, submit_gpu_request
    from tenants.choices import Role
    from tenants.models import Membership, Team
    from tenants.services.organisation import seed_demo_organisation

    teams = seed_demo_organisation(password="bench")
    seed_demo_fleet(teams=teams)
    seed_demo_prices()
    flavor = Flavor.objects.get(slug="l4-6g")
    team = Team.objects.get(slug="vision")
    project = team.projects.order_by("pk").first()
    assert project is not None
    Quota.objects.filter(team=team, flavor=flavor).update(guaranteed=1000, limit=1000)
    found: list[Person] = []
    for number in range(people):
        user = get_user_model().objects.create_user(f"follower{number}", password="bench")
        Membership.objects.create(user=user, team=team, role=Role.DEVELOPER)
        request = submit_gpu_request(
            actor=user,
            spec=GpuRequestSpec(
                project=project,
                flavor=flavor,
                gpu_count=1,
                image="jupyter/base-notebook:2026-01",
                kind="notebook",
                max_runtime_seconds=4 * 3600,
            ),
        )
        _, token = AuthToken.objects.create(user)
        browser = Client()
        browser.force_login(user)
        workload_cookie = cookie_value(user=user, request_id=request.pk)
        found.append(Person(token, browser.cookies["sessionid"].value, request.pk, workload_cookie))
    # One scheduling cycle admits them all, the simulated cluster starts them, and they have
    # been running for a while when the cluster is next synced.
    cycle.run_cycle()
    backend = SimulatedCluster()
    for admitted in GpuRequest.objects.filter(pk__in=[p.notebook_id for p in found]):
        execution.launch_request(request_id=admitted.pk, attempt=admitted.attempt, backend=backend)
    begin = timezone.now() - timedelta(seconds=LOG_LINE_SECONDS * 10)
    SimulatedWorkload.objects.filter(request_key__in=[str(p.notebook_id) for p in found]).update(
        created_at=begin - timedelta(seconds=5),
        starts_at=begin,
        ends_at=timezone.now() + timedelta(hours=4),
        fails=False,
    )
    execution.sync_workloads(backend=backend)
    running = GpuRequest.objects.filter(
        pk__in=[p.notebook_id for p in found], status=RequestStatus.RUNNING
    ).count()
    if running != people:
        raise SystemExit(f"only {running} of {people} notebooks run; the fleet is too small")
    return found


def start_web(env: dict[str, str], port: int, workers: int) -> subprocess.Popen[bytes]:
    from portal.management.commands.run_portal import web_command

    server = subprocess.Popen(
        [*web_command(address=f"127.0.0.1:{port}", workers=workers), "--access-logfile=/dev/null"],
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(ROOT)},
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            call(port, "/healthz", {})
            return server
        except OSError:
            time.sleep(0.3)
    os.killpg(server.pid, signal.SIGTERM)
    raise SystemExit("the web server did not answer /healthz within 60 s")


def server_cpu_seconds(pid: int) -> float:
    """CPU time (user + system) of the gunicorn master and its worker processes so far."""
    ticks = os.sysconf("SC_CLK_TCK")
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    total = 0
    for process in [str(pid), *children]:
        fields = Path(f"/proc/{process}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / ticks


def call(port: int, path: str, headers: dict[str, str]) -> float:
    """One GET on a new connection; its latency in ms (an error status is fatal)."""
    began = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        response.read()
        if response.status != 200:
            raise SystemExit(f"GET {path}: {response.status}")
    finally:
        connection.close()
    return (time.perf_counter() - began) * 1000


def measure(port: int, person: Person, calls: int, followers: int) -> dict[str, float]:
    """The page and the auth check, `calls` each, from two clients at once."""
    from runtime.services.workload_access import COOKIE_NAME

    session = {"Cookie": f"sessionid={person.session}"}
    workload = {"Cookie": f"{COOKIE_NAME}={person.workload_cookie}"}
    paths = {
        "page": ("/requests/", session),
        "auth_check": (f"/auth/workloads/{person.notebook_id}/", workload),
    }
    for path, cookie in paths.values():  # warm
        call(port, path, cookie)

    def series(target: tuple[str, dict[str, str]]) -> list[float]:
        path, cookie = target
        return [call(port, path, cookie) for _ in range(calls)]

    with ThreadPoolExecutor(len(paths)) as pool:
        futures = {name: pool.submit(series, path) for name, path in paths.items()}
        results = {name: future.result() for name, future in futures.items()}
    figures: dict[str, float] = {}
    for name, samples in results.items():
        p99 = statistics.quantiles(samples, n=100, method="inclusive")[98]
        figures[name] = p99
        emit(f"{name}_p50_ms", statistics.median(samples), "ms", followers=followers)
        emit(f"{name}_p99_ms", p99, "ms", followers=followers, target=P99_TARGET_MS)
        emit(f"{name}_max_ms", max(samples), "ms", followers=followers)
    return figures


@dataclass
class Follower:
    """One followed log on its own connection, read line by line in its own thread."""

    port: int
    person: Person
    lines: int = 0
    status: int | None = None
    ended: str = ""
    first_lines: threading.Event = field(default_factory=threading.Event)
    connection: http.client.HTTPConnection | None = None

    def run(self) -> None:
        path = f"/api/v1/requests/{self.person.notebook_id}/logs/?tail=5&follow=1"
        self.connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        try:
            self.connection.request(
                "GET", path, headers={"Authorization": f"Token {self.person.token}"}
            )
            response = self.connection.getresponse()
            self.status = response.status
            while response.readline():
                self.lines += 1
                self.first_lines.set()
            self.ended = "the stream ended"
        except OSError as error:
            self.ended = str(error) or type(error).__name__
        finally:
            self.first_lines.set()

    def close(self) -> None:
        if self.connection is not None and self.connection.sock is not None:
            self.connection.sock.shutdown(2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--followers", type=int, default=50)
    parser.add_argument("--calls", type=int, default=400, help="of each kind, per phase")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args()
    url = os.environ.get("BENCH_STREAMS_DATABASE_URL", DEFAULT_URL)
    redis_url = os.environ.get("BENCH_STREAMS_REDIS_URL", DEFAULT_REDIS)
    env = {**os.environ, **server_environment(url, redis_url)}
    # What the seeding queues (estimates, notices) runs inline; the server queues nothing.
    os.environ.update(server_environment(url, redis_url), CELERY_TASK_ALWAYS_EAGER="true")

    # 1. A fresh database, migrated and seeded.
    recreate_database(url)
    import django

    django.setup()
    from django.core.cache import cache
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    cache.clear()  # no stream slots left from an earlier run
    people = seed(-(-args.followers // STREAMS_PER_USER))
    from django.db import connections

    connections.close_all()

    # 2. The web tier as deployed.
    port = free_port()
    server = start_web(env, port, args.workers)
    followers: list[Follower] = []
    try:
        # 3. No one following.
        measure(port, people[0], args.calls, followers=0)
        # 4. N followers, each holding its stream open while the same calls are measured.
        followers = [
            Follower(port, people[index // STREAMS_PER_USER]) for index in range(args.followers)
        ]
        began = time.monotonic()
        for follower in followers:
            threading.Thread(target=follower.run, daemon=True).start()
        for follower in followers:
            follower.first_lines.wait(FIRST_LINES_SECONDS)
        streaming = [f for f in followers if f.status == 200 and f.lines and not f.ended]
        emit("followers_streaming", len(streaming), "streams", followers=args.followers)
        emit("all_first_lines_s", time.monotonic() - began, "s", followers=args.followers)
        if len(streaming) != args.followers:
            raise SystemExit(f"only {len(streaming)} of {args.followers} streams stream")
        # What the open streams alone cost the server: its CPU over a window with no calls.
        cpu_before, window_began = server_cpu_seconds(server.pid), time.monotonic()
        time.sleep(IDLE_WINDOW_SECONDS)
        share = (server_cpu_seconds(server.pid) - cpu_before) / (time.monotonic() - window_began)
        emit("followers_server_cpu", share * 100, "% of a core", followers=args.followers)
        measure(port, people[0], args.calls, followers=args.followers)
        still_open = sum(1 for f in followers if not f.ended)
        emit("followers_still_open", still_open, "streams", followers=args.followers)
        emit(
            "follower_lines_received",
            sum(f.lines for f in followers),
            "lines",
            followers=args.followers,
        )
    finally:
        for follower in followers:
            follower.close()
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
