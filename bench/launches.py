"""One vGPU notebook launch, measured: `python -m bench.launches [--launches N]`.

On a test bed of its own (`ceil(N / 8)` kwok L4 nodes shaped as the notebook scenario of
bench/e2e.py has them), a fresh database with N developers' `l4-6g` notebooks admitted by one
scheduling cycle, and the portal's settings for routed notebooks (an Ingress per workload
host), this process runs the launch task's service (`execution.launch_request`) for each
request, one after the other, as one Celery process would. Per launch it records the wall
time, this process's CPU time, the API requests (method and path, and the time spent in them)
and the database statements (and their time); the rest of the wall time is Python: the spec
and the manifests, the client's (de)serialisation, the audit. Over all launches (plus 5 s for
the controllers to catch up, less their idle rate) it records the CPU time of each control
plane process and of the PostgreSQL backend.

Left out: the Celery task's own overhead (the queue marks in Redis), the queue wait, other
launches running at once.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench.e2e import (
    NOTEBOOK_FLAVOR,
    WORKLOAD_DOMAIN,
    long_running_stages,
    ready_cluster,
    seed_notebook_users,
    server_environment,
    vgpu_node,
)
from bench.figures import emit, recreate_database
from scripts.testbed.cluster import Testbed, missing_binaries

DEFAULT_URL = "postgres://portal:portal@127.0.0.1:5432/portal_bench_launches"
DEFAULT_REDIS = "redis://127.0.0.1:6379/13"
NOTEBOOKS_PER_NODE = 8
SETTLE_SECONDS = 5.0


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Recorder:
    """The API requests and database statements of what runs between `start` and `stop`."""

    def __init__(self, api_client: Any) -> None:
        self.api: list[tuple[str, float]] = []
        self.sql: list[tuple[str, float]] = []
        call_api = api_client.call_api

        def timed_call(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return call_api(method, url, *args, **kwargs)
            finally:
                self.api.append((f"{method} {urlsplit(url).path}", time.perf_counter() - began))

        api_client.call_api = timed_call

    def statement(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        began = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.sql.append((sql, time.perf_counter() - began))

    def clear(self) -> None:
        self.api.clear()
        self.sql.clear()


def cpu_seconds(pids: list[int]) -> float:
    """The user and system CPU time the processes `pids` used so far."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / ticks


def admitted_notebooks(ids: dict[str, Any]) -> list[int]:
    """Each developer submits one notebook; one scheduling cycle admits them all."""
    from django.contrib.auth import get_user_model

    from scheduling.choices import RequestStatus
    from scheduling.models import Flavor, GpuRequest
    from scheduling.services import cycle
    from scheduling.services.requests import GpuRequestSpec, submit_gpu_request
    from tenants.models import Project

    project = Project.objects.get(pk=ids["project"])
    flavor = Flavor.objects.get(slug=NOTEBOOK_FLAVOR)
    users = get_user_model().objects.filter(username__startswith="nb").order_by("username")
    pks = [
        submit_gpu_request(
            actor=user,
            spec=GpuRequestSpec(
                project=project,
                flavor=flavor,
                gpu_count=1,
                kind="notebook",
                image="registry.example.com/ml/jupyter:2024.10",
                max_runtime_seconds=3600,
                reason="launch benchmark",
            ),
        ).pk
        for user in users
    ]
    cycle.run_cycle()
    admitted = GpuRequest.objects.filter(pk__in=pks, status=RequestStatus.ADMITTED)
    return sorted(admitted.values_list("pk", flat=True))


def measure(pks: list[int], kubeconfig: Path, cluster_pids: dict[str, int]) -> dict[str, Any]:
    from django.db import connection

    from runtime.cluster.kubernetes import KubernetesClusterBackend
    from runtime.services import execution

    backend = KubernetesClusterBackend(kubeconfig=str(kubeconfig))
    recorder = Recorder(backend.api_client)
    launches = []
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (database_pid,) = cursor.fetchone()

    # The control plane's own rate while nothing happens, to take out of the launches' share.
    def components() -> dict[str, float]:
        return {name: cpu_seconds([pid]) for name, pid in cluster_pids.items()}

    began, idle = time.perf_counter(), components()
    time.sleep(SETTLE_SECONDS)
    idle_rate = {
        name: (seconds - idle[name]) / (time.perf_counter() - began)
        for name, seconds in components().items()
    }
    began, cluster, database = time.perf_counter(), components(), cpu_seconds([database_pid])
    with connection.execute_wrapper(recorder.statement):
        for pk in pks:
            recorder.clear()
            wall, cpu = time.perf_counter(), time.process_time()
            execution.launch_request(request_id=pk, attempt=1, backend=backend)
            launches.append(
                {
                    "wall": time.perf_counter() - wall,
                    "cpu": time.process_time() - cpu,
                    "api": list(recorder.api),
                    "sql": list(recorder.sql),
                }
            )
    database = cpu_seconds([database_pid]) - database
    time.sleep(SETTLE_SECONDS)  # what the controllers, scheduler and kwok do after the creates
    elapsed = time.perf_counter() - began
    cluster = {
        name: seconds - cluster[name] - idle_rate[name] * elapsed
        for name, seconds in components().items()
    }
    return {"launches": launches, "cluster_cpu": cluster, "database_cpu": database}


def report(measured: dict[str, Any]) -> None:
    """The figures of the launches after the first (which warms the process up), as p50."""
    launches = measured["launches"]
    steady = launches[1:] or launches

    def p50(values: list[float]) -> float:
        return statistics.median(values)

    def per_launch(key: str, value: Any) -> list[float]:
        return [value(launch[key]) for launch in steady]

    walls = per_launch("wall", float)
    api_seconds = per_launch("api", lambda calls: sum(t for _, t in calls))
    sql_seconds = per_launch("sql", lambda statements: sum(t for _, t in statements))
    rest = [w - a - s for w, a, s in zip(walls, api_seconds, sql_seconds, strict=True)]
    cluster = {name: seconds / len(launches) for name, seconds in measured["cluster_cpu"].items()}
    log(f"launches: {len(launches)}; the first took {launches[0]['wall']:.3f} s")
    log(
        f"wall p50 {p50(walls):.3f} s (max {max(walls):.3f} s): API {p50(api_seconds):.3f} s, "
        f"SQL {p50(sql_seconds):.3f} s, the rest {p50(rest):.3f} s"
    )
    calls: dict[str, list[float]] = {}
    for launch in steady:
        for call, seconds in launch["api"]:
            calls.setdefault(call, []).append(seconds)
    for call, seconds in calls.items():
        log(f"  {len(seconds) / len(steady):.0f}x {call}: p50 {p50(seconds) * 1000:.1f} ms")
    kinds = Counter(sql.split(" ", 1)[0] for launch in steady for sql, _ in launch["sql"])
    log("  SQL: " + ", ".join(f"{n / len(steady):.0f} {k}" for k, n in kinds.items()))
    if os.environ.get("BENCH_LAUNCHES_SQL"):
        for sql, seconds in steady[-1]["sql"]:
            log(f"    {seconds * 1000:.1f} ms {sql[:200]}")
    log(
        "CPU per launch: control plane "
        + ", ".join(f"{name} {seconds:.3f} s" for name, seconds in cluster.items())
        + f"; PostgreSQL backend {measured['database_cpu'] / len(launches):.3f} s"
    )
    emit("launches.wall_p50_seconds", p50(walls), "s")
    emit("launches.api_requests", p50(per_launch("api", len)), "requests")
    emit("launches.sql_statements", p50(per_launch("sql", len)), "statements")
    emit("launches.process_cpu_p50_seconds", p50(per_launch("cpu", float)), "s")
    emit("launches.control_plane_cpu_seconds", sum(cluster.values()), "s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=20)
    options = parser.parse_args()
    if missing_binaries():
        log("test-bed binaries missing: run `make testbed` first")
        return 2
    url = os.environ.get("BENCH_LAUNCHES_DATABASE_URL", DEFAULT_URL)
    redis_url = os.environ.get("BENCH_LAUNCHES_REDIS_URL", DEFAULT_REDIS)
    workdir = Path(tempfile.mkdtemp(prefix="bench-launches-"))
    bed = Testbed(stages_file=long_running_stages(workdir))
    try:
        bed.start(nodes=[])
        nodes = math.ceil(options.launches / NOTEBOOKS_PER_NODE)
        bed.add_nodes([vgpu_node(f"launch-l4-{i:03d}") for i in range(nodes)], timeout=600)
        os.environ.update(
            server_environment(url, redis_url, bed.portal_kubeconfig)
            | {
                "PORTAL_URL": "http://127.0.0.1:8000",
                "WORKLOAD_DOMAIN": WORKLOAD_DOMAIN,
                "WORKLOAD_SCHEME": "http",
                "WORKLOAD_ROUTE": "ingress",
            }
        )
        import django

        django.setup()
        from django.core.management import call_command

        recreate_database(url)
        call_command("migrate", verbosity=0)
        ids = seed_notebook_users(options.launches)
        log(f"inventory {ready_cluster(bed)}")
        pks = admitted_notebooks(ids)
        log(f"admitted {len(pks)} notebooks; load average {os.getloadavg()[0]:.1f}")
        pids = {n: c.process.pid for n, c in bed.components.items() if c.process is not None}
        measured = measure(pks, bed.portal_kubeconfig, pids)
        emit("launches.load_average", os.getloadavg()[0], "runnable")
    finally:
        bed.stop()
    report(measured)
    return 0


if __name__ == "__main__":
    sys.exit(main())
