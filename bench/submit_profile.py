"""Where a create and an approval spend their time: cProfile and statement counts, in process.

    python -m bench.submit_profile [--calls N] [--show-sql]

1. Recreates the database at BENCH_SUBMIT_DATABASE_URL (default `portal_bench_submit`), migrates
   it and seeds it as `bench.api` does (the demo fleet, 8 teams, 6,000 finished requests), with
   Redis at BENCH_SUBMIT_REDIS_URL for throttles and the broker, in production mode
   (`bench.api.server_environment`). One developer and one lead of each team get a token.
2. Through Django's test client (the whole middleware and DRF stack, no server, no network), in
   three passes over the same kinds of call: a create approved at once (as `make bench-api`
   posts it), a create that waits for a lead (high priority), and a lead's approval of one:
   * statements: each SQL statement of a call is counted and put down to the layer of the
     stack that sent it (token auth, throttle, validation, lookup, service, after commit,
     response); `--show-sql` prints those of one call of each kind;
   * time: N calls of each kind without a profiler, wall and this process's CPU per call;
   * profile: N calls of each kind under cProfile, twice: each layer's share of the wall time
     and of this process's CPU time.
3. Prints one JSON line per figure (`submit.<call>.<figure>`) and a table on stderr.

Leaves out: gunicorn and HTTP parsing (`make bench-api` has them), the PostgreSQL backend's own
CPU (in the wall time, not in the CPU time), a Celery worker (the tasks a call queues wait in
Redis; publishing them is measured), concurrency (one caller: no wait on a lock).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import random
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.api import seed, server_environment
from bench.figures import emit, recreate_database

DEFAULT_URL = "postgres://portal:portal@127.0.0.1:5432/portal_bench_submit"
DEFAULT_REDIS = "redis://127.0.0.1:6379/7"
CALLS = ("create", "create_pending", "approve")

# The layers of a call, each named by the functions that run it: (path ending, function).
# A statement is put down to the innermost of them on its stack; a layer's time is the
# cumulative time of its functions under cProfile (they do not nest in one another).
LAYERS: dict[str, tuple[tuple[str, str], ...]] = {
    "token auth": (("knox/auth.py", "authenticate"),),
    "throttle": (("rest_framework/throttling.py", "allow_request"),),
    "validation": (("rest_framework/serializers.py", "is_valid"),),
    "lookup": (("rest_framework/generics.py", "get_object"),),
    "service": (
        ("scheduling/services/requests.py", "submit_gpu_request"),
        ("scheduling/services/requests.py", "approve_gpu_request"),
    ),
    "commit": (("django/db/backends/base/base.py", "commit"),),
    "after commit": (("django/db/backends/base/base.py", "run_and_clear_commit_hooks"),),
    "response": (
        ("rest_framework/serializers.py", "data"),
        ("rest_framework/renderers.py", "render"),
    ),
}
OTHER = "other (middleware, routing, view)"


def marked_layer(function: tuple[str, int, str]) -> str | None:
    """The layer a profiled function (path, line, name) marks, if any."""
    path, _, name = function
    for layer, functions in LAYERS.items():
        if any(name == fn and path.endswith(suffix) for suffix, fn in functions):
            return layer
    return None


def layer_of_stack() -> str:
    """The innermost layer on the current stack."""
    for frame, _ in traceback.walk_stack(None):
        layer = marked_layer((frame.f_code.co_filename, 0, frame.f_code.co_name))
        if layer is not None:
            return layer
    return OTHER


class StatementLog:
    """Counts each statement sent while active, by layer (an execute wrapper on the connection)."""

    def __init__(self) -> None:
        self.by_layer: Counter[str] = Counter()
        self.sql: list[tuple[str, str]] = []

    def __call__(self, execute: Callable[..., Any], sql: str, *args: Any) -> Any:
        layer = layer_of_stack()
        self.by_layer[layer] += 1
        self.sql.append((layer, sql))
        return execute(sql, *args)


@contextmanager
def statements() -> Iterator[StatementLog]:
    from django.db import connection

    log = StatementLog()
    with connection.execute_wrapper(log):
        yield log


class Caller:
    """Posts the three kinds of call through the test client, one team after another."""

    def __init__(self, pairs: list[dict[str, Any]]) -> None:
        from django.test import Client

        self.client = Client()
        self.pairs = pairs
        self.turn = 0
        self.pending: list[tuple[str, int]] = []  # (lead's token, request id)

    def _pair(self) -> dict[str, Any]:
        self.turn += 1
        return self.pairs[self.turn % len(self.pairs)]

    def _post(self, token: str, path: str, body: dict[str, Any], expect: int) -> Any:
        response = self.client.post(
            path,
            data=json.dumps(body),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Token {token}",
        )
        if response.status_code != expect:
            raise SystemExit(f"{path}: {response.status_code} {response.content[:300]!r}")
        return response.json()

    def _create(self, pair: dict[str, Any], priority: str) -> Any:
        body = {
            "project": pair["project_id"],
            "flavor": pair["flavor_id"],
            "gpu_count": 1,
            "kind": "job",
            "image": "registry.example.com/train:1",
            "command": ["python", "train.py"],
            "max_runtime_seconds": 3600,
            "priority": priority,
        }
        return self._post(pair["developer"], "/api/v1/requests/", body, 201)

    def create(self) -> None:
        answer = self._create(self._pair(), "normal")
        assert answer["status"] == "queued", answer["status"]

    def create_pending(self) -> None:
        pair = self._pair()
        answer = self._create(pair, "high")
        assert answer["status"] == "pending_approval", answer["status"]
        self.pending.append((pair["lead"], answer["id"]))

    def approve(self) -> None:
        lead, pk = self.pending.pop(0)
        answer = self._post(lead, f"/api/v1/requests/{pk}/approve/", {"comment": "ok"}, 200)
        assert answer["status"] == "queued", answer["status"]

    def run(self, call: str) -> None:
        getattr(self, call)()


def pairs_of_teams() -> list[dict[str, Any]]:
    """A developer's and a lead's token for each team that has both, and where they submit."""
    from knox.models import AuthToken

    from scheduling.models import Flavor
    from tenants.choices import Role
    from tenants.models import Membership, Team

    flavor = Flavor.objects.get(slug="l4-6g")
    pairs = []
    for team in Team.objects.order_by("pk"):
        members = {m.role: m.user for m in Membership.objects.filter(team=team)}
        project = team.projects.order_by("pk").first()
        if Role.DEVELOPER in members and Role.TEAM_LEAD in members and project is not None:
            pairs.append(
                {
                    "developer": AuthToken.objects.create(members[Role.DEVELOPER])[1],
                    "lead": AuthToken.objects.create(members[Role.TEAM_LEAD])[1],
                    "project_id": project.pk,
                    "flavor_id": flavor.pk,
                }
            )
    return pairs


def count_statements(caller: Caller, calls: int, show_sql: bool) -> dict[str, Counter[str]]:
    counts: dict[str, Counter[str]] = {}
    for call in CALLS:
        logs = []
        for _ in range(calls):
            if call == "approve":
                caller.create_pending()
            with statements() as log:
                caller.run(call)
            logs.append(log)
        per_call = {sum(log.by_layer.values()) for log in logs}
        if len(per_call) != 1:
            print(f"# {call}: statements per call vary: {sorted(per_call)}", file=sys.stderr)
        counts[call] = logs[-1].by_layer
        if show_sql:
            print(f"# statements of one {call}:", file=sys.stderr)
            for layer, sql in logs[-1].sql:
                print(f"#   [{layer}] {sql[:160]}", file=sys.stderr)
    return counts


def time_calls(caller: Caller, calls: int) -> dict[str, tuple[float, float]]:
    """Wall and CPU milliseconds per call of each kind, without a profiler."""
    timings = {}
    for call in CALLS:
        if call == "approve":
            for _ in range(calls):
                caller.create_pending()
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(calls):
            caller.run(call)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        timings[call] = (1000 * wall / calls, 1000 * cpu / calls)
    return timings


def profile_calls(
    caller: Caller, calls: int, timer: Callable[[], float], top: int = 0
) -> dict[str, dict[str, float]]:
    """Each layer's share of a call's time under cProfile, in percent: of the wall time
    (`time.perf_counter`: waits on PostgreSQL and Redis included) or of this process's CPU
    (`time.process_time`); with `top`, the functions that took most, cumulatively."""
    shares = {}
    for call in CALLS:
        if call == "approve":
            for _ in range(calls):
                caller.create_pending()
        profiler = cProfile.Profile(timer)
        profiler.enable()
        for _ in range(calls):
            caller.run(call)
        profiler.disable()
        stats = pstats.Stats(profiler, stream=sys.stderr)
        if top:
            print(f"# {call}: the {top} functions with most cumulative time", file=sys.stderr)
            stats.sort_stats("cumulative").print_stats(top)
        total = stats.total_tt  # type: ignore[attr-defined]
        cumulative: Counter[str] = Counter()
        for key, (_, _, _, spent, callers) in stats.stats.items():  # type: ignore[attr-defined]
            layer = marked_layer(key)
            if layer is not None:
                # A marker called by a marker (Serializer.data by its subclass's) is counted
                # once, in its caller.
                nested = sum(edge[3] for parent, edge in callers.items() if marked_layer(parent))
                cumulative[layer] += spent - nested
        share = {layer: 100 * cumulative[layer] / total for layer in LAYERS}
        share[OTHER] = max(0.0, 100 - sum(share.values()))
        shares[call] = share
    return shares


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="calls of each kind per pass")
    parser.add_argument("--show-sql", action="store_true", help="print one call's statements")
    parser.add_argument(
        "--top", type=int, default=0, help="print the N functions taking most CPU, per kind"
    )
    options = parser.parse_args()

    url = os.environ.get("BENCH_SUBMIT_DATABASE_URL", DEFAULT_URL)
    redis_url = os.environ.get("BENCH_SUBMIT_REDIS_URL", DEFAULT_REDIS)
    os.environ.update(server_environment(url, redis_url))
    os.environ["ALLOWED_HOSTS"] = "testserver"
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

    # 1. A fresh database, seeded as for the API benchmark.
    started = time.perf_counter()
    recreate_database(url)
    import django

    django.setup()
    from django.core.cache import cache
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    cache.clear()
    seed(random.Random(9))
    caller = Caller(pairs_of_teams())
    print(f"# seeded in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    emit("submit.load_average_before", os.getloadavg()[0], "runnable")

    # 2. Warm up (imports, the connection, the caches), then the three passes.
    for call in CALLS:
        for _ in range(5):
            if call == "approve":
                caller.create_pending()
            caller.run(call)
    counts = count_statements(caller, min(options.calls, 10), options.show_sql)
    timings = time_calls(caller, options.calls)
    shares = profile_calls(caller, options.calls, time.perf_counter)
    cpu_shares = profile_calls(caller, options.calls, time.process_time, options.top)
    emit("submit.load_average_after", os.getloadavg()[0], "runnable")

    # 3. The figures.
    for call in CALLS:
        wall_ms, cpu_ms = timings[call]
        emit(f"submit.{call}.wall_ms", wall_ms, "ms/call")
        emit(f"submit.{call}.cpu_ms", cpu_ms, "ms/call")
        emit(f"submit.{call}.statements", sum(counts[call].values()), "statements/call")
        for layer in [*LAYERS, OTHER]:
            key = layer.split(" (")[0].replace(" ", "_")
            emit(f"submit.{call}.{key}.percent", shares[call][layer], "%")
            emit(f"submit.{call}.{key}.cpu_percent", cpu_shares[call][layer], "%")
            emit(f"submit.{call}.{key}.statements", counts[call][layer], "statements/call")
    print("# share of wall % / CPU %, statements, per call", file=sys.stderr)
    print(f"# {'layer':<34}" + "".join(f"{call:>24}" for call in CALLS), file=sys.stderr)
    for layer in [*LAYERS, OTHER]:
        cells = "".join(
            f"{shares[call][layer]:>8.1f} /{cpu_shares[call][layer]:>5.1f} %"
            f"{counts[call][layer]:>4} st"
            for call in CALLS
        )
        print(f"# {layer:<34}{cells}", file=sys.stderr)
    totals = "".join(
        f"{timings[call][0]:>7.1f} /{timings[call][1]:>5.1f} ms{sum(counts[call].values()):>4} st"
        for call in CALLS
    )
    print(f"# {'per call: wall / CPU ms, statements':<34}{totals}", file=sys.stderr)


if __name__ == "__main__":
    main()
