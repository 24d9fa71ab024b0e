"""API load benchmark: the product against a stock DRF viewset, on gunicorn + PostgreSQL.

    python -m bench.api [--seconds S] [--clients N] [--workers W]      (make bench-api)

1. Recreates the database at BENCH_API_DATABASE_URL (default `portal_benchapi`), migrates it and
   seeds the demo fleet plus extra teams: several teams, one API token per developer and lead,
   thousands of requests.
2. Starts gunicorn (`bench.api_wsgi`: the product plus the references of `bench.api_urls`, a
   stock DRF `ModelViewSet` over the same rows and the floor create; sync workers, one per
   core) on a free loopback port, with Redis at BENCH_API_REDIS_URL for throttles and the
   broker. Neither the product nor the baseline keeps responses in a cache.
3. Checks that the product's list and the baseline's answer the same page with the same JSON,
   then builds the load generator (`bench/loadgen`, Go, standard library only) and runs one
   scenario at a time, 16 clients each by default: after a warm-up of both lists, the product's
   list and the baseline's list each alone, before anything writes; then the 70/20/10 mix
   (list, detail, create) on the product and on the baseline; then create alone on the product,
   the baseline and the floor. It prints one JSON line per figure.

The load generator runs on the same 2 cores as the server: every figure is what the server
reaches while sharing the machine with its client, and the product and its references are
measured in the same run, with the same data, cache state and client, so their ratios say more
than the absolute figures.
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
    "list": {"list": 1},
    "baseline_list": {"baseline_list": 1},
    "mixed": {"list": 70, "detail": 20, "create": 10},
    "baseline_mixed": {"baseline_list": 70, "baseline_detail": 20, "baseline_create": 10},
    "create": {"create": 1},
    "baseline_create": {"baseline_create": 1},
    "floor_create": {"floor_create": 1},
}
PRODUCT = "/api/v1/requests/"
BASELINE = "/bench/baseline/requests/"
PATHS = {
    "list": PRODUCT,
    "detail": PRODUCT,
    "create": PRODUCT,
    "baseline_list": BASELINE,
    "baseline_detail": BASELINE,
    "baseline_create": BASELINE,
    "floor_create": "/bench/floor/requests/",
}
CREATES = {"create", "baseline_create", "floor_create"}


def call_variants(name: str, host: str, fixture: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every concrete request a call may make: one per user and page, visible id or project."""
    variants = []
    prefix = PATHS[name]
    for identity in fixture:
        headers = {"Authorization": f"Token {identity['token']}"}
        if name.endswith("list"):
            urls = [f"{prefix}?page={page}" for page in range(1, identity["pages"] + 1)]
        elif name.endswith("detail"):
            urls = [f"{prefix}{pk}/" for pk in identity["request_ids"][:100]]
        else:
            headers = {**headers, "Content-Type": "application/json"}
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


def fetch_json(url: str, token: str) -> Any:
    request = urllib.request.Request(url, headers={"Authorization": f"Token {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def check_same_answers(host: str, fixture: list[dict[str, Any]]) -> None:
    """The product and the baseline must serve the same JSON for the same page, else stop."""
    for identity in (fixture[0], fixture[-1]):
        for page in (1, identity["pages"]):
            product = fetch_json(f"{host}{PRODUCT}?page={page}", identity["token"])
            baseline = fetch_json(f"{host}{BASELINE}?page={page}", identity["token"])
            for links in ("next", "previous"):
                product.pop(links, None)
                baseline.pop(links, None)
            if product != baseline:
                raise SystemExit(
                    f"the baseline's page {page} differs from the product's: "
                    f"{json.dumps(product)[:300]} != {json.dumps(baseline)[:300]}"
                )


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
            "expect": 201 if name in CREATES else 200,
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


def run_scenario(scenario: str, seconds: int, common: dict[str, Any]) -> dict[str, Any]:
    """One scenario: its figures per call, and its failures printed when there were any."""
    figures = run_load(scenario=scenario, seconds=seconds, **common)
    failures = figures["Aggregated"]["failures"]
    if failures:
        emit(f"api.{scenario}_failures", failures, "requests")
    return figures


def emit_call(prefix: str, stats: dict[str, float]) -> None:
    emit(f"{prefix}_rps", stats["rps"], "req/s")
    emit(f"{prefix}_p50_ms", stats["p50_ms"], "ms")
    emit(f"{prefix}_p99_ms", stats["p99_ms"], "ms")


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

    # 2. The server. The machine may be shared: its load average before the server starts and
    # after the last scenario (which includes the benchmark's own load) says how much it was.
    emit("api.load_average_before", os.getloadavg()[0], "runnable")
    port = free_port()
    server = start_gunicorn(env, port, options.workers)
    host = f"http://127.0.0.1:{port}"
    emit("api.gunicorn_workers", options.workers, "workers")
    emit("api.clients", options.clients, "clients")
    build_directory = tempfile.TemporaryDirectory()
    try:
        # 3. The scenarios. Both lists answer alike, then warm up (every worker opens its
        # database connection and imports its code); the read scenarios run before anything
        # writes, so both lists page over the same rows.
        check_same_answers(host, fixture_rows)
        common = {
            "generator": build_load_generator(Path(build_directory.name)),
            "host": host,
            "clients": options.clients,
            "fixture": fixture_rows,
        }
        for warm_up in ("list", "baseline_list"):
            run_load(scenario=warm_up, seconds=5, **common)
        runs = {
            scenario: run_scenario(scenario, options.seconds, common)
            for scenario in (
                "list",
                "baseline_list",
                "mixed",
                "baseline_mixed",
                "create",
                "baseline_create",
                "floor_create",
            )
        }

        for scenario in ("mixed", "baseline_mixed"):
            for name, stats in runs[scenario].items():
                if name != "Aggregated":
                    emit_call(f"api.{scenario}.{name.removeprefix('baseline_')}", stats)
            emit_call(f"api.{scenario}", runs[scenario]["Aggregated"])
        for scenario in ("list", "baseline_list", "create", "baseline_create", "floor_create"):
            emit_call(f"api.{scenario}", runs[scenario][scenario])

        emit("api.load_average_after", os.getloadavg()[0], "runnable")

        def rps(scenario: str) -> float:
            return float(runs[scenario][scenario]["rps"])

        emit("api.list_vs_baseline_ratio", rps("list") / max(rps("baseline_list"), 1e-9), "ratio")
        emit(
            "api.mixed_vs_baseline_ratio",
            runs["mixed"]["Aggregated"]["rps"]
            / max(runs["baseline_mixed"]["Aggregated"]["rps"], 1e-9),
            "ratio",
        )
        emit("api.create_vs_floor_ratio", rps("create") / max(rps("floor_create"), 1e-9), "ratio")
        emit(
            "api.create_vs_baseline_ratio",
            rps("create") / max(rps("baseline_create"), 1e-9),
            "ratio",
        )
    finally:
        server.terminate()
        server.wait(timeout=30)
        build_directory.cleanup()


if __name__ == "__main__":
    main()
