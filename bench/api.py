"""API load benchmark: the product against stock DRF viewsets, on gunicorn + PostgreSQL.

    python -m bench.api [--seconds S] [--clients N] [--workers W]      (make bench-api)

1. Recreates the database at BENCH_API_DATABASE_URL (default `portal_benchapi`), migrates it and
   seeds the demo fleet plus extra teams: several teams, one API token per developer and lead,
   thousands of requests.
2. Starts gunicorn (`bench.api_wsgi`: the product plus the references of `bench.api_urls`: a
   stock DRF `ModelViewSet` over the same rows (the baseline), the same with the
   `select_related` and `prefetch_related` the DRF docs prescribe (the tuned baseline), and the
   floor create; sync workers, one per core) on a free loopback port, with Redis at
   BENCH_API_REDIS_URL for throttles and the broker. No one keeps responses in a cache.
3. Checks that the product's list and both references' answer the same page with the same JSON,
   then builds the load generator (`bench/loadgen`, Go, standard library only) and runs one
   scenario at a time, 16 clients each by default, after a warm-up of the three lists: the
   lists, before anything writes; the 70/20/10 mix (list, detail, create) on the product and
   on both references; create alone on the product, the baseline and the floor.
   The scenarios of each group take turns (`--slices`), so that a change in the machine's load
   falls on all of them. It prints one JSON line per figure, with the server's CPU per call
   and the mean latency, measured and as Little's law implies it (clients / req/s).

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
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from bench.figures import emit, recreate_database
from scripts.testbed.ports import free_port

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_URL = "postgres://portal:portal@127.0.0.1:5432/portal_benchapi"
DEFAULT_REDIS = "redis://127.0.0.1:6379/7"
EXTRA_TEAMS = 6
SEEDED_REQUESTS = 6_000
P99_TARGET_MS = 150


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
        # As deployed (the Helm chart's ConfigMap): one connection per worker, kept.
        "CONN_MAX_AGE": "60",
    }


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
    from scheduling.models import Allocation, Flavor, GpuRequest, Quota, Tier
    from tenants.choices import Role
    from tenants.models import Membership, Project, Team
    from tenants.services.organisation import seed_demo_organisation

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
        status = rng.choice(finished)
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
                status=status,
                status_reason="Seeded for the load benchmark.",
                # Succeeded and failed requests ran (attempt 1, an allocation each, as the
                # product keeps them); cancelled ones were cancelled before they started.
                attempt=0 if status == RequestStatus.CANCELLED else 1,
                started_at=now - timedelta(hours=2),
                finished_at=now - timedelta(hours=1),
            )
        )
    GpuRequest.objects.bulk_create(rows, batch_size=2_000)
    ran = [row for row in rows if row.attempt]
    Allocation.objects.bulk_create(
        [
            Allocation(
                request=row,
                attempt=1,
                pool_id=flavor.pool_id,
                claims=[
                    {
                        "node": f"gpu-node-{i % 40:02d}",
                        "device_index": i % 8,
                        "whole": False,
                        "memory_mib": 6144,
                        "cores_percent": 25,
                        "mig_profile": "",
                        "mig_start": None,
                    }
                ],
                workload_name=f"req-{row.pk}-1",
                node_name=f"gpu-node-{i % 40:02d}",
                started_at=now - timedelta(hours=2),
                ended_at=now - timedelta(hours=1),
                end_reason="Seeded for the load benchmark.",
                pod_names=[f"req-{row.pk}-1-{i:05x}"],
                exit_code=0 if row.status == RequestStatus.SUCCEEDED else 1,
                exit_reason="Completed" if row.status == RequestStatus.SUCCEEDED else "Error",
                termination_reason=""
                if row.status == RequestStatus.SUCCEEDED
                else "Error: container main exited with code 1",
            )
            for i, row in enumerate(ran)
        ],
        batch_size=2_000,
    )
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
    "tuned_baseline_list": {"tuned_baseline_list": 1},
    "mixed": {"list": 70, "detail": 20, "create": 10},
    "baseline_mixed": {"baseline_list": 70, "baseline_detail": 20, "baseline_create": 10},
    "tuned_baseline_mixed": {
        "tuned_baseline_list": 70,
        "tuned_baseline_detail": 20,
        "tuned_baseline_create": 10,
    },
    "create": {"create": 1},
    "baseline_create": {"baseline_create": 1},
    "floor_create": {"floor_create": 1},
}
PRODUCT = "/api/v1/requests/"
BASELINE = "/bench/baseline/requests/"
TUNED_BASELINE = "/bench/tuned-baseline/requests/"
PATHS = {
    "list": PRODUCT,
    "detail": PRODUCT,
    "create": PRODUCT,
    "baseline_list": BASELINE,
    "baseline_detail": BASELINE,
    "baseline_create": BASELINE,
    "tuned_baseline_list": TUNED_BASELINE,
    "tuned_baseline_detail": TUNED_BASELINE,
    "tuned_baseline_create": TUNED_BASELINE,
    "floor_create": "/bench/floor/requests/",
}
CREATES = {"create", "baseline_create", "tuned_baseline_create", "floor_create"}


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
    """The product and each reference must serve the same JSON for the same page, else stop."""
    for identity in (fixture[0], fixture[-1]):
        for page in (1, identity["pages"]):
            product = fetch_json(f"{host}{PRODUCT}?page={page}", identity["token"])
            for links in ("next", "previous"):
                product.pop(links, None)
            for name, prefix in (("baseline", BASELINE), ("tuned baseline", TUNED_BASELINE)):
                reference = fetch_json(f"{host}{prefix}?page={page}", identity["token"])
                for links in ("next", "previous"):
                    reference.pop(links, None)
                if product != reference:
                    raise SystemExit(
                        f"the {name}'s page {page} differs from the product's: "
                        f"{json.dumps(product)[:300]} != {json.dumps(reference)[:300]}"
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
    seconds: float,
    fixture: list[dict[str, Any]],
) -> dict[str, dict[str, Any]]:
    """One run of a scenario: per call and in aggregate, counts, failures, seconds, latencies."""
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
                "-raw",
            ],
            check=True,
            capture_output=True,
            text=True,
        )
    for line in completed.stderr.splitlines():
        print(f"# {scenario}: {line}", file=sys.stderr)
    result: dict[str, dict[str, Any]] = json.loads(completed.stdout)
    return result


class ServerMeter:
    """CPU seconds spent so far by the gunicorn workers and the database's PostgreSQL backends.

    Read from /proc (the server runs on this machine), so that the CPU a call costs can be told
    apart from the load other processes put on a shared machine. Redis (shared with others) and
    PostgreSQL's own background processes are left out; a backend that reconnects during a
    slice (`CONN_MAX_AGE`) takes its share of that slice with it.
    """

    def __init__(self, server_pid: int, database_url: str) -> None:
        import psycopg

        self.server_pid = server_pid
        self.database = database_url.rsplit("/", 1)[1]
        admin_url = database_url.rsplit("/", 1)[0] + "/postgres"
        self.admin = psycopg.connect(admin_url, autocommit=True)
        self.tick = os.sysconf("SC_CLK_TCK")

    def close(self) -> None:
        self.admin.close()

    @staticmethod
    def _stat(pid: int | str) -> list[str] | None:
        try:
            text = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None
        return text[text.rindex(")") + 2 :].split()  # the fields after the command name

    def _pids(self) -> set[int]:
        workers = set()
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                fields = self._stat(entry.name)
                if fields is not None and int(fields[1]) == self.server_pid:
                    workers.add(int(entry.name))
        backends = self.admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s", [self.database]
        ).fetchall()
        return workers | {int(row[0]) for row in backends}

    def read(self) -> dict[int, float]:
        used = {}
        for pid in self._pids():
            fields = self._stat(pid)
            if fields is not None:  # utime and stime, fields 14 and 15 of stat(5)
                used[pid] = (int(fields[11]) + int(fields[12])) / self.tick
        return used


def percentile(latencies_us: list[int], q: float) -> float:
    """As the load generator takes it: the value at rank q of the sorted latencies, in ms."""
    if not latencies_us:
        return 0.0
    return sorted(latencies_us)[int(q * (len(latencies_us) - 1))] / 1000


def measure(
    scenarios: tuple[str, ...],
    *,
    seconds: float,
    slices: int,
    common: dict[str, Any],
    meter: ServerMeter,
) -> dict[str, dict[str, dict[str, float]]]:
    """Run each scenario for `seconds` in all, in `slices` turns taken in rotation.

    On a shared machine the load of other processes changes from one second to the next;
    taking turns puts the product and its reference under the same changes. Each scenario's
    turns are merged: counts and seconds summed, percentiles over every latency, and the
    server's CPU (workers and database backends) per call.
    """
    latencies: dict[str, dict[str, list[int]]] = {name: {} for name in scenarios}
    failures: dict[str, dict[str, int]] = {name: {} for name in scenarios}
    elapsed = dict.fromkeys(scenarios, 0.0)
    cpu = dict.fromkeys(scenarios, 0.0)
    for _ in range(slices):
        for scenario in scenarios:
            before = meter.read()
            result = run_load(scenario=scenario, seconds=seconds / slices, **common)
            after = meter.read()
            cpu[scenario] += sum(used - before.get(pid, 0.0) for pid, used in after.items())
            elapsed[scenario] += result["Aggregated"]["seconds"]
            for call, stats in result.items():
                if call != "Aggregated":
                    latencies[scenario].setdefault(call, []).extend(stats.get("latencies_us", []))
                    failures[scenario][call] = failures[scenario].get(call, 0) + stats["failures"]

    figures: dict[str, dict[str, dict[str, float]]] = {}
    for scenario in scenarios:
        every = [latency for call in latencies[scenario].values() for latency in call]
        calls = {**latencies[scenario], "Aggregated": every}
        figures[scenario] = {
            call: {
                "count": len(values),
                "failures": (
                    sum(failures[scenario].values())
                    if call == "Aggregated"
                    else failures[scenario][call]
                ),
                "rps": len(values) / elapsed[scenario],
                "p50_ms": percentile(values, 0.50),
                "p99_ms": percentile(values, 0.99),
                "mean_ms": sum(values) / max(len(values), 1) / 1000,
                "cpu_ms": 1000 * cpu[scenario] / max(len(every), 1),
            }
            for call, values in calls.items()
        }
        if figures[scenario]["Aggregated"]["failures"]:
            emit(
                f"api.{scenario}_failures", figures[scenario]["Aggregated"]["failures"], "requests"
            )
    return figures


def emit_call(prefix: str, stats: dict[str, float], *, clients: int = 0, cpu: bool = False) -> None:
    """A call's figures; for a whole scenario (`cpu`) also its CPU per call and mean latency.

    A closed loop of C clients completing X calls a second has a mean latency of C / X
    (Little's law): `_implied_mean_ms` says that figure, `_mean_ms` the one measured.
    """
    emit(f"{prefix}_rps", stats["rps"], "req/s")
    emit(f"{prefix}_p50_ms", stats["p50_ms"], "ms")
    emit(f"{prefix}_p99_ms", stats["p99_ms"], "ms")
    if cpu:
        emit(f"{prefix}_mean_ms", stats["mean_ms"], "ms")
        emit(f"{prefix}_implied_mean_ms", 1000 * clients / max(stats["rps"], 1e-9), "ms")
        emit(f"{prefix}_cpu_ms", stats["cpu_ms"], "ms/call")


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
    parser.add_argument(
        "--slices",
        type=int,
        default=4,
        help="turns each scenario's time is cut into, taken in rotation with its references",
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
        f"# seeded {len(fixture_rows)} API users, {SEEDED_REQUESTS} requests (those that "
        "ran with their allocation) "
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
    # Little's law: the mean latency of the closed loop is clients / req/s, so a p99 within the
    # target needs at least this rate even if every call took the same time.
    emit("api.p99_target_min_rps", options.clients / (P99_TARGET_MS / 1000), "req/s")
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
        for warm_up in ("list", "baseline_list", "tuned_baseline_list"):
            run_load(scenario=warm_up, seconds=5, **common)
        meter = ServerMeter(server.pid, url)
        runs: dict[str, dict[str, dict[str, float]]] = {}
        for group in (
            ("list", "baseline_list", "tuned_baseline_list"),
            ("mixed", "baseline_mixed", "tuned_baseline_mixed"),
            ("create", "baseline_create", "floor_create"),
        ):
            runs |= measure(
                group, seconds=options.seconds, slices=options.slices, common=common, meter=meter
            )
        meter.close()
        emit("api.load_average_after", os.getloadavg()[0], "runnable")

        clients = options.clients
        for scenario in ("mixed", "baseline_mixed", "tuned_baseline_mixed"):
            for name, stats in runs[scenario].items():
                if name != "Aggregated":
                    emit_call(f"api.{scenario}.{name.rsplit('baseline_', 1)[-1]}", stats)
            emit_call(f"api.{scenario}", runs[scenario]["Aggregated"], clients=clients, cpu=True)
        for scenario in (
            "list",
            "baseline_list",
            "tuned_baseline_list",
            "create",
            "baseline_create",
            "floor_create",
        ):
            emit_call(f"api.{scenario}", runs[scenario][scenario], clients=clients, cpu=True)

        def ratio(name: str, scenario: str, reference: str) -> None:
            ours, theirs = runs[scenario]["Aggregated"], runs[reference]["Aggregated"]
            emit(f"api.{name}_ratio", ours["rps"] / max(theirs["rps"], 1e-9), "ratio")
            # The same ratio from the server's CPU per call: steadier on a shared machine.
            emit(f"api.{name}_cpu_ratio", theirs["cpu_ms"] / max(ours["cpu_ms"], 1e-9), "ratio")

        ratio("list_vs_baseline", "list", "baseline_list")
        ratio("list_vs_tuned_baseline", "list", "tuned_baseline_list")
        ratio("mixed_vs_baseline", "mixed", "baseline_mixed")
        ratio("mixed_vs_tuned_baseline", "mixed", "tuned_baseline_mixed")
        ratio("create_vs_floor", "create", "floor_create")
        ratio("create_vs_baseline", "create", "baseline_create")
    finally:
        server.terminate()
        server.wait(timeout=30)
        build_directory.cleanup()


if __name__ == "__main__":
    main()
