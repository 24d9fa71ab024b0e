"""Reports benchmark: chargeback, chart series and drill-down from the rollups vs raw GROUP BY.

    python -m bench.reports [--rows N]      (make bench-reports; PostgreSQL at BENCH_DATABASE_URL)

Generates usage rows (200 teams, 2,000 projects, 10 flavors, 6 months by default) as CSV files
of 200,000 rows and imports each with the product's command (`manage.py import_usage FILE.csv`:
COPY into a staging table, rollups current when it returns), then times the selectors the API
uses (`accounting.selectors.usage_rows`) against the plain GROUP BY over the ledger in the same
run. Prints one JSON line per figure.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from bench.figures import emit, recreate_database

DEFAULT_URL = "postgres://portal:portal@127.0.0.1:5432/portal_bench"
BATCH = 200_000
RUNS = 30
ROUNDS = 3


def p95(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=20)[18] if len(samples) > 1 else samples[0]


def setup_django(url: str) -> None:
    recreate_database(url)
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def make_catalogue(teams: int, projects: int, flavors: int) -> dict[str, Any]:

    from django.contrib.auth import get_user_model

    from scheduling.models import Flavor, NodePool, Tier
    from tenants.models import Project, Team

    tier = Tier.objects.create(name="bench", slug="bench")
    pools = [
        NodePool.objects.create(
            name=f"pool {i}", slug=f"pool-{i}", tier=tier, sharing_mode="exclusive"
        )
        for i in range(2)
    ]
    flavor_rows = [
        Flavor.objects.create(
            name=f"flavor {i}",
            slug=f"flavor-{i}",
            pool=pools[i % 2],
            kind="whole",
            gpu_model="A100",
            gpu_memory_mib=81920,
            gpu_equivalent=Decimal(1),
        )
        for i in range(flavors)
    ]
    team_rows = Team.objects.bulk_create(
        [Team(name=f"team {i}", slug=f"team-{i}") for i in range(teams)]
    )
    project_rows = Project.objects.bulk_create(
        [
            Project(team=team_rows[i % teams], name=f"project {i}", slug=f"project-{i}")
            for i in range(projects)
        ]
    )
    user = get_user_model().objects.create_user("bench-finance")
    from tenants.models import Membership

    Membership.objects.create(user=user, role="finance")
    return {
        "projects": [(p.pk, p.team_id) for p in project_rows],
        "flavors": [(f.pk, f.pool_id) for f in flavor_rows],
        "user": user,
        "team_ids": [t.pk for t in team_rows],
    }


def generate(
    start: int,
    size: int,
    per_day: int,
    days: int,
    first_day: date,
    catalogue: dict[str, Any],
    rng: random.Random,
) -> str:
    """CSV rows start… in `USAGE_COLUMNS` order: one allocation each, within one day."""
    projects, flavors = catalogue["projects"], catalogue["flavors"]
    owner = catalogue["user"].pk
    lines = []
    for i in range(start, start + size):
        day = first_day + timedelta(days=min(i // per_day, days - 1))
        project_id, team_id = projects[rng.randrange(len(projects))]
        flavor_id, pool_id = flavors[rng.randrange(len(flavors))]
        seconds = rng.randrange(60, 86_400)
        began = datetime(day.year, day.month, day.day, tzinfo=UTC)
        hours = seconds / 3600
        lines.append(
            f"{i + 1},{day.replace(day=1)},{day},{team_id},{project_id},{flavor_id},{pool_id},"
            f"{owner},1,f,{began.isoformat()},"
            f"{(began + timedelta(seconds=seconds)).isoformat()},{seconds},"
            f"{hours:.6f},{hours * 2.5:.6f}\n"
        )
    return "".join(lines)


def ingest(rows: int, catalogue: dict[str, Any], first_day: date, days: int) -> float:
    """Rows arrive in time order (a file covers a few days) as CSV files and go through the
    product's command, `manage.py import_usage FILE.csv`; returns rows per second (generating
    and writing the files is not timed)."""
    from django.core.management import call_command

    from accounting.services.ingest import USAGE_COLUMNS

    rng = random.Random(8)
    per_day = max(rows // days, 1)
    elapsed = 0.0
    done = 0
    with tempfile.TemporaryDirectory(prefix="bench-reports-") as folder:
        path = os.path.join(folder, "usage.csv")
        while done < rows:
            size = min(BATCH, rows - done)
            with open(path, "w", encoding="utf-8") as file:
                file.write(",".join(USAGE_COLUMNS) + "\n")
                file.write(generate(done, size, per_day, days, first_day, catalogue, rng))
            began = time.perf_counter()
            call_command("import_usage", path, verbosity=0)
            elapsed += time.perf_counter() - began
            done += size
    from django.db import connection

    # Not timed: settle the database before the reports are timed, so that they measure the
    # steady state and not autovacuum and checkpoint writes catching up with the bulk load.
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
        cursor.execute("CHECKPOINT")
    return rows / elapsed


def timed(fn: Any, runs: int = RUNS) -> list[float]:
    fn()  # warm
    samples = []
    for _ in range(runs):
        began = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - began) * 1000)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--teams", type=int, default=200)
    parser.add_argument("--projects", type=int, default=2_000)
    parser.add_argument("--flavors", type=int, default=10)
    parser.add_argument("--months", type=int, default=6)
    args = parser.parse_args()
    setup_django(os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL))

    from django.db import connection

    from accounting.selectors.usage import UsageQuery, usage_rows

    with connection.cursor() as cursor:
        # Bulk ingest depends on the server's memory and WAL settings (docs/operations.md).
        cursor.execute(
            "SELECT string_agg(name || '=' || current_setting(name), ', ' ORDER BY name)"
            " FROM pg_settings"
            " WHERE name IN ('server_version', 'shared_buffers', 'max_wal_size', 'work_mem')"
        )
        print(f"# PostgreSQL {cursor.fetchone()[0]}", flush=True)
    catalogue = make_catalogue(args.teams, args.projects, args.flavors)
    first_day = date(2026, 1, 1)
    last_month = date(2026, args.months, 1)
    days = (date(2026 + args.months // 12, args.months % 12 + 1, 1) - first_day).days
    emit("reports.ingest_rows_per_second", ingest(args.rows, catalogue, first_day, days), "rows/s")

    user = catalogue["user"]
    month = last_month
    project_id, team_id = catalogue["projects"][0]

    def chargeback() -> Any:
        return usage_rows(
            user=user,
            query=UsageQuery(month_from=month, month_to=month, group_by=("team", "flavor")),
        )

    def series() -> Any:
        query = UsageQuery(
            month_from=first_day, month_to=last_month, project_id=project_id, group_by=("day",)
        )
        return usage_rows(user=user, query=query)

    def drilldown() -> Any:
        query = UsageQuery(
            month_from=month, month_to=month, team_id=team_id, group_by=("project", "flavor")
        )
        return usage_rows(user=user, query=query)

    def raw() -> Any:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT team_id, flavor_id, sum(gpu_hours), sum(cost) FROM accounting_usagerecord"
                " WHERE period = %s GROUP BY team_id, flavor_id",
                [month],
            )
            return cursor.fetchall()

    assert len(chargeback()) == len(raw())
    # Right after a 10-million-row load the VM is still writing it back, which shows as spikes
    # of several times the steady latency. Every figure is therefore the best of ROUNDS rounds
    # (as timeit takes the best of its repeats), raw GROUP BY included; each round is printed.
    rounds = []
    for number in range(1, ROUNDS + 1):
        figures = {
            "chargeback": p95(timed(chargeback)),
            "series": p95(timed(series)),
            "drilldown": p95(timed(drilldown)),
            "raw": statistics.median(timed(raw, runs=3)),
        }
        print(f"round {number}: " + ", ".join(f"{k} {v:.1f} ms" for k, v in figures.items()))
        rounds.append(figures)
    charge = min(r["chargeback"] for r in rounds)
    raw_ms = min(r["raw"] for r in rounds)
    emit("reports.chargeback_p95_ms", charge, "ms")
    emit("reports.series_p95_ms", min(r["series"] for r in rounds), "ms")
    emit("reports.drilldown_p95_ms", min(r["drilldown"] for r in rounds), "ms")
    emit("reports.raw_groupby_ms", raw_ms, "ms")
    emit("reports.chargeback_speedup", raw_ms / charge, "x")


if __name__ == "__main__":
    main()
