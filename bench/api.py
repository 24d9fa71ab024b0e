"""API load benchmark: a compiled load generator against gunicorn + PostgreSQL on loopback.

    python -m bench.api [--seconds S] [--clients N] [--workers W]      (make bench-api)

1. Recreates the database at BENCH_API_DATABASE_URL (default `portal_benchapi`), migrates it and
   seeds the demo fleet plus extra teams: several teams, one API token per developer and lead,
   thousands of requests.
2. Starts gunicorn (`bench.api_wsgi`: the product plus the baseline endpoints, a plain DRF list
   and create; sync workers, one per core) on a free loopback port, with Redis at
   BENCH_API_REDIS_URL for the cache, throttles and the broker.
3. Builds the load generator (`bench/loadgen`, Go, standard library only) and runs one scenario
   at a time: list, the summary endpoint and the plain-DRF baseline list each on their own
   (after a warm-up, before anything writes), then the 70/20/10 mix, create on its own, the
   plain-DRF baseline create and the floor create (a DRF view with no serializer, one INSERT),
   and prints one JSON line per figure.

The load generator runs on the same 2 cores as the server: every figure is what the server
reaches while sharing the machine with its client. A compiled client leaves the server more of
them than Locust did (Locust's FastHttpUser reached 985 req/s on `/healthz` where this client
reached 1,645 from the same server), so the figures say more about the server.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_URL = "postgres://portal:portal@127.0.0.1:5432/portal_benchapi"
DEFAULT_REDIS = "redis://127.0.0.1:6390/7"
EXTRA_TEAMS = 6
SEEDED_REQUESTS = 6_000


def emit(metric: str, value: float, unit: str) -> None:
    print(json.dumps({"metric": metric, "value": round(value, 3), "unit": unit}), flush=True)


def server_environment(url: str, redis_url: str) -> dict[str, str]:
    """What both this process and gunicorn run with: production mode on loopback."""
    return {
        "DATABASE_URL": url,
        "REDIS_URL": redis_url,
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "DEBUG": "false",
        "SECRET_KEY": "bench-api-only-" + "x" * 40,
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "SECURE_SSL_REDIRECT": "false",
        # The per-user creation limit (120/minute) would measure the throttle, not the server.
        "REQUEST_CREATE_RATE": "1000000/minute",
        "CLUSTER_BACKEND": "simulated",
        # As deployed (deploy/manifests/10-config.yaml): one connection per worker, kept.
        "CONN_MAX_AGE": "60",
    }


def recreate_database(url: str) -> None:
    import psycopg

    admin_url = url.rsplit("/", 1)[0] + "/postgres"
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def team_of(user: Any) -> Any:
    from tenants.models import Membership

    team = Membership.objects.get(user=user).team
    assert team is not None
    return team


def seed(rng: random.Random) -> list[dict[str, Any]]:
    """The demo organisation, extra teams like it, requests, and one token per API user."""
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.utils import timezone
    from knox.models import AuthToken

    from accounting.demo import seed_demo_prices
    from scheduling.choices import RequestStatus
    from scheduling.demo import seed_demo_fleet
    from scheduling.models import Flavor, GpuRequest, Quota, Tier
    from tenants.choices import Role
    from tenants.models import Membership, Project, Team
    from tenants.services import seed_demo_organisation

    teams = seed_demo_organisation(password="bench")
    seed_demo_fleet(teams=teams)
    seed_demo_prices()
    user_model = get_user_model()
    flavor = Flavor.objects.get(slug="l4-6g")
    developers: list[Any] = list(user_model.objects.filter(username__in=["alice", "carol"]))
    leads: list[Any] = list(user_model.objects.filter(username__in=["bob", "dan"]))
    for number in range(EXTRA_TEAMS):
        team = Team.objects.create(name=f"Bench team {number}", slug=f"bench-{number}")
        for project in ("train", "serve"):
            Project.objects.create(team=team, slug=project, name=project.upper())
        for tier in Tier.objects.filter(slug__in=["dev", "inference"]):
            tier.allowed_teams.add(team)
        for role, bucket in ((Role.DEVELOPER, developers), (Role.TEAM_LEAD, leads)):
            user = user_model.objects.create_user(f"bench{number}-{role}", password="bench")
            Membership.objects.create(user=user, team=team, role=role)
            bucket.append(user)
    # Room for every create of the run: the quota check runs, and approves within guaranteed.
    Quota.objects.filter(project__isnull=True).update(guaranteed=100_000, limit=100_000)
    for team in Team.objects.exclude(quotas__flavor=flavor):
        Quota.objects.create(team=team, flavor=flavor, guaranteed=100_000, limit=100_000)

    now = timezone.now()
    finished = [RequestStatus.SUCCEEDED, RequestStatus.FAILED, RequestStatus.CANCELLED]
    rows = []
    owners = [(user, team_of(user)) for user in developers]
    projects = {team.pk: list(team.projects.all()) for _, team in owners}
    for index in range(SEEDED_REQUESTS):
        owner, team = owners[index % len(owners)]
        rows.append(
            GpuRequest(
                project=rng.choice(projects[team.pk]),
                team=team,
                owner=owner,
                flavor=flavor,
                gpu_count=1,
                gpu_memory_mib=6144,
                gpu_cores_percent=25,
                image="registry.example.com/train:1",
                command=["python", "train.py"],
                max_runtime_seconds=3600,
                gpu_equivalent=Decimal("0.25"),
                status=rng.choice(finished),
                status_reason="Seeded for the load benchmark.",
                started_at=now - timedelta(hours=2),
                finished_at=now - timedelta(hours=1),
            )
        )
    GpuRequest.objects.bulk_create(rows, batch_size=2_000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")  # as after any bulk load: the planner sees the rows

    fixture = []
    for user in developers + leads:
        team = team_of(user)
        visible = list(
            GpuRequest.objects.visible_to(user).order_by("-id").values_list("id", flat=True)
        )
        _, token = AuthToken.objects.create(user)
        fixture.append(
            {
                "token": token,
                "project_ids": [p.pk for p in team.projects.all()],
                "flavor_id": flavor.pk,
                "request_ids": visible[:500],
                "pages": max(1, min(20, len(visible) // 50)),
            }
        )
    return fixture


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_gunicorn(env: dict[str, str], port: int, workers: int) -> subprocess.Popen[bytes]:
    server = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "gunicorn"),
            "bench.api_wsgi:application",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            str(workers),
            "--worker-class",
            "sync",
            "--backlog",
            "2048",
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1).read()
            return server
        except OSError:
            time.sleep(0.3)
    server.terminate()
    raise SystemExit("gunicorn did not answer /healthz within 60 s")


# The calls of each scenario and their weights: the mix is 70 % list, 20 % detail, 10 % create.
SCENARIOS = {
    "mixed": {"list": 70, "detail": 20, "create": 10},
    "list": {"list": 1},
    "create": {"create": 1},
    "summary": {"summary": 1},
    "baseline": {"baseline": 1},
    "baseline_create": {"baseline_create": 1},
    "floor_create": {"floor_create": 1},
}
CREATE_PATHS = {
    "create": "/api/v1/requests/",
    "baseline_create": "/bench/baseline/requests/",
    "floor_create": "/bench/floor/requests/",
}


def call_variants(name: str, host: str, fixture: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every concrete request a call may make: one per user and page, visible id or project."""
    variants = []
    for identity in fixture:
        headers = {"Authorization": f"Token {identity['token']}"}
        if name in ("list", "baseline"):
            prefix = "/api/v1/requests/" if name == "list" else "/bench/baseline/requests/"
            urls = [f"{prefix}?page={page}" for page in range(1, identity["pages"] + 1)]
        elif name == "detail":
            urls = [f"/api/v1/requests/{pk}/" for pk in identity["request_ids"][:100]]
        elif name == "summary":
            urls = ["/api/v1/requests/summary/"]
        else:
            headers = {**headers, "Content-Type": "application/json"}
            prefix = CREATE_PATHS[name]
            for project_id in identity["project_ids"]:
                body = {
                    "project": project_id,
                    "flavor": identity["flavor_id"],
                    "gpu_count": 1,
                    "kind": "job",
                    "image": "registry.example.com/train:1",
                    "command": ["python", "train.py"],
                    "max_runtime_seconds": 3600,
                }
                variants.append(
                    {
                        "method": "POST",
                        "url": f"{host}{prefix}",
                        "body": body,
                        "headers": headers,
                    }
                )
            continue
        variants += [{"method": "GET", "url": host + url, "headers": headers} for url in urls]
    return variants


def build_load_generator(directory: Path) -> Path:
    binary = directory / "loadgen"
    subprocess.run(
        ["go", "build", "-o", str(binary), "."],
        cwd=ROOT / "bench" / "loadgen",
        check=True,
        env={**os.environ, "CGO_ENABLED": "0"},
    )
    return binary


def run_load(
    *,
    generator: Path,
    scenario: str,
    host: str,
    clients: int,
    seconds: int,
    fixture: list[dict[str, Any]],
) -> dict[str, dict[str, float]]:
    """One run of a scenario; returns per-call counts, rps, failures, p50 and p99."""
    calls = [
        {
            "name": name,
            "weight": weight,
            "expect": 201 if name in CREATE_PATHS else 200,
            "variants": call_variants(name, host, fixture),
        }
        for name, weight in SCENARIOS[scenario].items()
    ]
    with tempfile.NamedTemporaryFile("w", suffix=".json") as handle:
        json.dump(calls, handle)
        handle.flush()
        completed = subprocess.run(
            [
                str(generator),
                "-scenario",
                handle.name,
                "-clients",
                str(clients),
                "-seconds",
                str(seconds),
            ],
            check=True,
            capture_output=True,
            text=True,
        )
    for line in completed.stderr.splitlines():
        print(f"# {scenario}: {line}", file=sys.stderr)
    result: dict[str, dict[str, float]] = json.loads(completed.stdout)
    return result


def run_scenario(scenario: str, seconds: int, common: dict[str, Any]) -> dict[str, float]:
    """One call on its own: its figures, and its failures printed when there were any."""
    stats = run_load(scenario=scenario, seconds=seconds, **common)[scenario]
    if stats["failures"]:
        emit(f"api.{scenario}_failures", stats["failures"], "requests")
    return stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=20, help="duration of each scenario")
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients")
    parser.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 2,
        help="gunicorn sync workers (default: one per core, the fastest here; see docs)",
    )
    options = parser.parse_args()

    url = os.environ.get("BENCH_API_DATABASE_URL", DEFAULT_URL)
    redis_url = os.environ.get("BENCH_API_REDIS_URL", DEFAULT_REDIS)
    env = {**os.environ, **server_environment(url, redis_url), "PYTHONPATH": str(ROOT)}
    os.environ.update(server_environment(url, redis_url))

    # 1. A fresh database, migrated and seeded.
    started = time.perf_counter()
    recreate_database(url)
    import django

    django.setup()
    from django.core.cache import cache
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    cache.clear()
    fixture_rows = seed(random.Random(9))
    print(
        f"# seeded {len(fixture_rows)} API users, {SEEDED_REQUESTS} requests "
        f"in {time.perf_counter() - started:.1f} s",
        file=sys.stderr,
    )
    from django.db import connections

    connections.close_all()

    # 2. The server.
    port = free_port()
    server = start_gunicorn(env, port, options.workers)
    host = f"http://127.0.0.1:{port}"
    emit("api.gunicorn_workers", options.workers, "workers")
    emit("api.clients", options.clients, "clients")
    build_directory = tempfile.TemporaryDirectory()
    try:
        # 3. The scenarios. A short warm-up first, so that every worker has its connections and
        # the list pages are kept: the read scenarios measure the steady state a polling client
        # sees. They run before anything writes, as a write makes its team's pages be computed
        # again (the mixed scenario measures that).
        common = {
            "generator": build_load_generator(Path(build_directory.name)),
            "host": host,
            "clients": options.clients,
            "fixture": fixture_rows,
        }
        run_load(scenario="list", seconds=5, **common)
        figures: dict[str, dict[str, float]] = {}
        for scenario in ("list", "summary", "baseline"):
            figures[scenario] = run_scenario(scenario, options.seconds, common)
        mixed = run_load(scenario="mixed", seconds=options.seconds, **common)
        for name in ("list", "detail", "create"):
            emit(f"api.mixed.{name}_rps", mixed[name]["rps"], "req/s")
            emit(f"api.mixed.{name}_p99_ms", mixed[name]["p99_ms"], "ms")
        emit("api.mixed_rps", mixed["Aggregated"]["rps"], "req/s")
        emit("api.mixed_failures", mixed["Aggregated"]["failures"], "requests")
        for scenario in CREATE_PATHS:
            figures[scenario] = run_scenario(scenario, options.seconds, common)

        emit("api.list_rps", figures["list"]["rps"], "req/s")
        emit("api.list_p99_ms", figures["list"]["p99_ms"], "ms")
        emit("api.create_rps", figures["create"]["rps"], "req/s")
        emit("api.create_p99_ms", figures["create"]["p99_ms"], "ms")
        emit("api.summary_rps", figures["summary"]["rps"], "req/s")
        emit("api.summary_p99_ms", figures["summary"]["p99_ms"], "ms")
        for call, baseline in (("list", "baseline"), ("create", "baseline_create")):
            emit(f"api.baseline_{call}_rps", figures[baseline]["rps"], "req/s")
            emit(f"api.baseline_{call}_p99_ms", figures[baseline]["p99_ms"], "ms")
            ratio = figures[call]["rps"] / max(figures[baseline]["rps"], 1e-9)
            emit(f"api.{call}_vs_baseline_ratio", ratio, "ratio")
        emit("api.floor_create_rps", figures["floor_create"]["rps"], "req/s")
        emit("api.floor_create_p99_ms", figures["floor_create"]["p99_ms"], "ms")
        ratio = figures["create"]["rps"] / max(figures["floor_create"]["rps"], 1e-9)
        emit("api.create_vs_floor_ratio", ratio, "ratio")
    finally:
        server.terminate()
        server.wait(timeout=30)
        build_directory.cleanup()


if __name__ == "__main__":
    main()
