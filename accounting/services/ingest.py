"""Bulk ingest: pieces of usage that do not come from the meter (imports, backfills, other
clusters) added to the ledger and every rollup in one transaction (`ingest_usage_csv`), and
whole usage files read in batches (`import_usage_file`, behind `manage.py import_usage`).
"""

from __future__ import annotations

import csv
import io
import itertools
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import IO, Any

from django.db import DatabaseError, IntegrityError, transaction
from django.db.models import F, Value
from django.db.models.functions import Greatest, Least
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from accounting.models import DailyUsage, MonthlyUsage, TeamMonthlyUsage, UsageRecord
from accounting.services.metering import AMOUNTS, _add
from tenants.errors import DomainError

#: Column order of the rows `ingest_usage` takes and of `manage.py import_usage` files: one piece
#: of usage of one allocation within one billing day (like the meter's pieces), `period` the first
#: day of that day's billing month.
USAGE_COLUMNS = (
    "allocation_id",
    "period",
    "day",
    "team_id",
    "project_id",
    "flavor_id",
    "pool_id",
    "owner_id",
    "gpu_count",
    "is_preemptible",
    "started_at",
    "ended_at",
    "seconds",
    "gpu_hours",
    "cost",
)
#: Optional last columns: the host CPU and memory parts of `cost` (GPU cost = the rest). A file
#: or rows without them are GPU cost only, as before CPU and memory were priced.
HOST_COST_COLUMNS = ("cpu_cost", "memory_cost")
WITH_HOST_COSTS = (*USAGE_COLUMNS, *HOST_COST_COLUMNS)

#: What a refused row is refused for, by the field `DomainError.fields` names.
_PROBLEMS = {
    "project": "unknown project, or a project outside the row's team",
    "flavor": "unknown flavor",
    "pool": "unknown pool",
    "owner": "unknown owner",
    "amounts": "a negative or not-a-number amount or GPU count, CPU and memory costs above the "
    "cost, an end before the start, or a period that is not the first day of the day's month",
}

# Raw SQL: the ORM has no temporary tables; COPY fills this one (below). `line` numbers the
# rows in the order COPY read them, for errors.
_STAGE = """CREATE TEMP TABLE IF NOT EXISTS accounting_usage_stage (
  allocation_id bigint NOT NULL, period date NOT NULL, day date NOT NULL,
  team_id bigint NOT NULL, project_id bigint NOT NULL, flavor_id bigint NOT NULL,
  pool_id bigint NOT NULL, owner_id integer NOT NULL, gpu_count integer NOT NULL,
  is_preemptible boolean NOT NULL, started_at timestamptz NOT NULL,
  ended_at timestamptz NOT NULL, seconds numeric NOT NULL, gpu_hours numeric NOT NULL,
  cost numeric NOT NULL, cpu_cost numeric NOT NULL DEFAULT 0,
  memory_cost numeric NOT NULL DEFAULT 0, line bigint GENERATED ALWAYS AS IDENTITY
)"""

_MALFORMED = """(period <> day - (extract(day FROM day)::integer - 1) OR ended_at < started_at
       OR seconds < 0 OR gpu_hours < 0 OR cost < 0 OR gpu_count < 0
       OR cpu_cost < 0 OR memory_cost < 0 OR cpu_cost + memory_cost > cost
       OR 'NaN' IN (seconds, gpu_hours, cost, cpu_cost, memory_cost))"""

# Raw SQL: it reads the temporary staging table, which has no model.
# The batch's distinct keys (and whether any row is malformed) in one pass over the staging
# table; each key is then looked up once, not once per row. Counts of offending keys/rows.
_CHECK = f"""WITH k AS MATERIALIZED (
    SELECT DISTINCT project_id, team_id, flavor_id, pool_id, owner_id,
      {_MALFORMED} AS malformed
    FROM accounting_usage_stage
  )
  SELECT
    (SELECT count(*) FROM (SELECT DISTINCT project_id, team_id FROM k) s
      LEFT JOIN tenants_project p ON p.id = s.project_id
      WHERE p.id IS NULL OR p.team_id <> s.team_id),
    (SELECT count(*) FROM (SELECT DISTINCT flavor_id FROM k) s
      WHERE NOT EXISTS (SELECT 1 FROM scheduling_flavor f WHERE f.id = s.flavor_id)),
    (SELECT count(*) FROM (SELECT DISTINCT pool_id FROM k) s
      WHERE NOT EXISTS (SELECT 1 FROM scheduling_nodepool n WHERE n.id = s.pool_id)),
    (SELECT count(*) FROM (SELECT DISTINCT owner_id FROM k) s
      WHERE NOT EXISTS (SELECT 1 FROM auth_user u WHERE u.id = s.owner_id)),
    (SELECT count(*) FROM k WHERE malformed)"""
_CHECKED = ("project", "flavor", "pool", "owner", "amounts")

# Raw SQL: it reads the staging table. Only when `_CHECK` found a problem: the first line of each.
_FIRST_BAD = f"""SELECT
    (SELECT min(s.line) FROM accounting_usage_stage s
      LEFT JOIN tenants_project p ON p.id = s.project_id
      WHERE p.id IS NULL OR p.team_id <> s.team_id),
    (SELECT min(s.line) FROM accounting_usage_stage s
      WHERE NOT EXISTS (SELECT 1 FROM scheduling_flavor f WHERE f.id = s.flavor_id)),
    (SELECT min(s.line) FROM accounting_usage_stage s
      WHERE NOT EXISTS (SELECT 1 FROM scheduling_nodepool n WHERE n.id = s.pool_id)),
    (SELECT min(s.line) FROM accounting_usage_stage s
      WHERE NOT EXISTS (SELECT 1 FROM auth_user u WHERE u.id = s.owner_id)),
    (SELECT min(line) FROM accounting_usage_stage WHERE {_MALFORMED})"""

# Raw SQL: INSERT … SELECT from the staging table, which the ORM cannot express.
# The usual bulk case: every piece is a new (allocation, month); the unique index refuses the
# batch otherwise, and `_LEDGER` sums and upserts it.
_LEDGER_NEW = """INSERT INTO accounting_usagerecord (allocation_id, period, team_id, project_id,
    flavor_id, pool_id, owner_id, gpu_count, is_preemptible, started_at, ended_at, seconds,
    gpu_hours, cost, cpu_cost, memory_cost)
  SELECT allocation_id, period, team_id, project_id, flavor_id, pool_id, owner_id, gpu_count,
    is_preemptible, started_at, ended_at, seconds, gpu_hours, cost, cpu_cost, memory_cost
  FROM accounting_usage_stage"""

# Raw SQL: an upsert that adds to the existing row (ON CONFLICT … DO UPDATE SET x = x + …).
# Pieces of one allocation and month add up to its ledger row (created or grown).
_LEDGER = """INSERT INTO accounting_usagerecord AS r (allocation_id, period, team_id, project_id,
    flavor_id, pool_id, owner_id, gpu_count, is_preemptible, started_at, ended_at, seconds,
    gpu_hours, cost, cpu_cost, memory_cost)
  SELECT allocation_id, period, team_id, project_id, flavor_id, pool_id, owner_id, gpu_count,
    is_preemptible, min(started_at), max(ended_at), sum(seconds), sum(gpu_hours), sum(cost),
    sum(cpu_cost), sum(memory_cost)
  FROM accounting_usage_stage
  GROUP BY allocation_id, period, team_id, project_id, flavor_id, pool_id, owner_id, gpu_count,
    is_preemptible
  ON CONFLICT (allocation_id, period) DO UPDATE SET
    started_at = least(r.started_at, excluded.started_at),
    ended_at = greatest(r.ended_at, excluded.ended_at),
    seconds = r.seconds + excluded.seconds,
    gpu_hours = r.gpu_hours + excluded.gpu_hours,
    cost = r.cost + excluded.cost,
    cpu_cost = r.cpu_cost + excluded.cpu_cost,
    memory_cost = r.memory_cost + excluded.memory_cost"""

# Raw SQL: data-modifying CTEs with additive upserts, which the ORM cannot express.
# One statement for the three rollups: the batch is summed per day once, months are summed from
# the days and team-months from the months, so each level reads the smaller one below it.
_ROLLUPS = """WITH d AS (
    SELECT day, period, team_id, project_id, flavor_id, pool_id,
      sum(gpu_hours) AS gpu_hours, sum(cost) AS cost, sum(cpu_cost) AS cpu_cost,
      sum(memory_cost) AS memory_cost
    FROM accounting_usage_stage GROUP BY day, period, team_id, project_id, flavor_id, pool_id
  ), daily AS (
    INSERT INTO accounting_dailyusage AS r (day, team_id, project_id, flavor_id, pool_id,
      gpu_hours, cost, cpu_cost, memory_cost)
    SELECT day, team_id, project_id, flavor_id, pool_id, gpu_hours, cost, cpu_cost, memory_cost
    FROM d
    ON CONFLICT (day, team_id, project_id, flavor_id, pool_id) DO UPDATE SET
      gpu_hours = r.gpu_hours + excluded.gpu_hours, cost = r.cost + excluded.cost,
      cpu_cost = r.cpu_cost + excluded.cpu_cost,
      memory_cost = r.memory_cost + excluded.memory_cost
  ), m AS (
    SELECT period, team_id, project_id, flavor_id, pool_id,
      sum(gpu_hours) AS gpu_hours, sum(cost) AS cost, sum(cpu_cost) AS cpu_cost,
      sum(memory_cost) AS memory_cost
    FROM d GROUP BY period, team_id, project_id, flavor_id, pool_id
  ), monthly AS (
    INSERT INTO accounting_monthlyusage AS r (period, team_id, project_id, flavor_id, pool_id,
      gpu_hours, cost, cpu_cost, memory_cost)
    SELECT period, team_id, project_id, flavor_id, pool_id, gpu_hours, cost, cpu_cost,
      memory_cost FROM m
    ON CONFLICT (period, team_id, project_id, flavor_id, pool_id) DO UPDATE SET
      gpu_hours = r.gpu_hours + excluded.gpu_hours, cost = r.cost + excluded.cost,
      cpu_cost = r.cpu_cost + excluded.cpu_cost,
      memory_cost = r.memory_cost + excluded.memory_cost
  )
  INSERT INTO accounting_teammonthlyusage AS r (period, team_id, flavor_id, pool_id, gpu_hours,
    cost, cpu_cost, memory_cost)
  SELECT period, team_id, flavor_id, pool_id, sum(gpu_hours), sum(cost), sum(cpu_cost),
    sum(memory_cost) FROM m
  GROUP BY period, team_id, flavor_id, pool_id
  ON CONFLICT (period, team_id, flavor_id, pool_id) DO UPDATE SET
    gpu_hours = r.gpu_hours + excluded.gpu_hours, cost = r.cost + excluded.cost,
    cpu_cost = r.cpu_cost + excluded.cpu_cost,
    memory_cost = r.memory_cost + excluded.memory_cost"""


#: Session memory for temporary tables: a 200,000-row batch (about 30 MB staged) is read four
#: times per call; with PostgreSQL's default 8 MB it would be written out and read back each time.
STAGE_BUFFERS = "64MB"


def _keep_stage_in_memory(cursor: Any) -> None:
    """Give the session room for the staging table, once, before it first uses one.

    PostgreSQL accepts a new `temp_buffers` only before a session's first temporary table;
    a session that already used one keeps what it has (slower, not wrong).
    """
    # Raw SQL: session settings have no ORM equivalent.
    cursor.execute("SHOW temp_buffers")
    if cursor.fetchone()[0] == STAGE_BUFFERS:
        return
    try:
        with transaction.atomic():
            cursor.execute(f"SET temp_buffers = '{STAGE_BUFFERS}'")
    except DatabaseError:
        pass


def _refused(first_bad: dict[str, int]) -> DomainError:
    """The error for rows that break a rule: the first line of each problem, nothing imported."""
    fields = {name: f"line {line}: {_PROBLEMS[name]}" for name, line in first_bad.items()}
    name, line = min(first_bad.items(), key=lambda item: item[1])
    return DomainError(
        "invalid", f"Line {line}: {_PROBLEMS[name]}. Nothing was imported.", fields=fields
    )


def ingest_usage(rows: Iterable[Sequence[Any]], *, columns: Sequence[str] = USAGE_COLUMNS) -> int:
    """Add pieces of usage given as Python rows (`columns` order: `USAGE_COLUMNS`, or
    `WITH_HOST_COSTS`); how many.

    Formats them as CSV (C-speed `csv` writer) for `ingest_usage_csv`.
    """
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    buffer.seek(0)
    return ingest_usage_csv(buffer, columns=columns)


def ingest_usage_csv(
    source: IO[str], *, first_line: int = 1, columns: Sequence[str] = USAGE_COLUMNS
) -> int:
    """Add pieces of usage from CSV text (no header, `USAGE_COLUMNS` order) to the ledger and
    every rollup in one transaction; how many pieces.

    The bulk path for usage that does not come from the meter (`manage.py import_usage`:
    imports, backfills, other clusters), so that rollups are current when it returns. A row
    with a bad value or a key the catalogue does not know refuses the whole batch with a
    `DomainError` naming its line (`first_line` is the line number of the text's first row).
    Pieces of one allocation and month add up to its ledger row (created or grown). Sending the
    same piece twice counts it twice: as with the meter's cursor, the caller owns what was sent.

    On PostgreSQL the text is streamed into a session-local staging table with COPY (parsed by
    PostgreSQL, not Python); the batch's keys are checked once against the catalogue; then one
    statement grows the ledger and one grows the three rollups. Pieces of allocations new to the
    ledger (the usual bulk case) are inserted as they are; if any piece continues a ledger row or
    shares its (allocation, month) with another, the batch is summed per (allocation, month) and
    upserted instead — same result, more work. Elsewhere (SQLite: the demo, small files) the rows
    are parsed and checked in Python and written through the ORM.
    """
    from django.db import connection

    if tuple(columns) not in (USAGE_COLUMNS, WITH_HOST_COSTS):
        raise ValueError(f"unknown usage columns: {columns}")
    if connection.vendor != "postgresql":
        return _ingest_with_orm(source, first_line=first_line, columns=tuple(columns))
    with transaction.atomic(), connection.cursor() as cursor:
        _keep_stage_in_memory(cursor)
        cursor.execute(_STAGE)
        # Raw SQL: emptied first, as an earlier batch refused mid-COPY leaves the numbering on.
        cursor.execute("TRUNCATE accounting_usage_stage RESTART IDENTITY")
        # Raw SQL (a session setting): a 200,000-row batch's per-(allocation, month) sums stay
        # in memory (no spill)
        cursor.execute("SET LOCAL work_mem = '256MB'")
        count = _copy_to_stage(cursor, source, first_line=first_line, columns=columns)
        if count:
            cursor.execute(_CHECK)
            if any(cursor.fetchone()):
                cursor.execute(_FIRST_BAD)
                lines = zip(_CHECKED, cursor.fetchone(), strict=True)
                raise _refused(
                    {name: first_line + line - 1 for name, line in lines if line is not None}
                )
            try:
                with transaction.atomic():  # savepoint: a clash undoes only this insert
                    cursor.execute(_LEDGER_NEW)
            except IntegrityError:
                cursor.execute(_LEDGER)
            cursor.execute(_ROLLUPS)
        cursor.execute("TRUNCATE accounting_usage_stage")
    return count


def _copy_to_stage(cursor: Any, source: IO[str], *, first_line: int, columns: Sequence[str]) -> int:
    """COPY the CSV text into the staging table; a value PostgreSQL cannot read names its line."""
    import psycopg

    names = ", ".join(columns)
    try:
        # Raw SQL: PostgreSQL COPY, which the ORM cannot issue.
        with cursor.cursor.copy(
            f"COPY accounting_usage_stage ({names}) FROM STDIN (FORMAT csv)"
        ) as copy:
            while chunk := source.read(1 << 20):
                copy.write(chunk)
    except (psycopg.errors.DataError, psycopg.errors.NotNullViolation) as error:
        # e.g. 'COPY accounting_usage_stage, line 3, column seconds: "abc"'
        where = re.search(r"line (\d+)(?:, column (\w+))?", error.diag.context or "")
        line = first_line + int(where.group(1)) - 1 if where else first_line
        column = where.group(2) if where else None
        problem = (error.diag.message_primary or str(error)).rstrip(".")
        place = f"Line {line}, {column}" if column else f"Line {line}"
        raise DomainError(
            "invalid",
            f"{place}: {problem}. Nothing was imported.",
            fields={column or "row": f"line {line}: {problem}"},
        ) from error
    return max(cursor.cursor.rowcount, 0)


def _parse_usage_row(
    values: list[str], line: int, columns: tuple[str, ...] = USAGE_COLUMNS
) -> dict[str, Any]:
    """One CSV row as typed values, or a `DomainError` naming the line and the column."""
    if len(values) != len(columns):
        raise DomainError(
            "invalid",
            f"Line {line}: {len(values)} values, expected {len(columns)}. Nothing was imported.",
            fields={"row": f"line {line}: expected {len(columns)} values"},
        )
    row: dict[str, Any] = dict.fromkeys(HOST_COST_COLUMNS, Decimal(0))
    for column, text in zip(columns, values, strict=True):
        try:
            row[column] = _USAGE_PARSERS[column](text.strip())
        except (ValueError, ArithmeticError) as error:
            raise DomainError(
                "invalid",
                f"Line {line}, {column}: not a valid value: {text!r}. Nothing was imported.",
                fields={column: f"line {line}: not a valid value: {text!r}"},
            ) from error
    return row


def _parse_bool(text: str) -> bool:
    value = text.lower()
    if value in {"t", "true", "1", "yes", "y"}:
        return True
    if value in {"f", "false", "0", "no", "n"}:
        return False
    raise ValueError(text)


def _parse_moment(text: str) -> datetime:
    moment = parse_datetime(text)
    if moment is None:
        raise ValueError(text)
    return moment if timezone.is_aware(moment) else moment.replace(tzinfo=UTC)


_USAGE_PARSERS: dict[str, Callable[[str], Any]] = {
    **dict.fromkeys(
        ("allocation_id", "team_id", "project_id", "flavor_id", "pool_id", "owner_id"), int
    ),
    "gpu_count": int,
    "period": date.fromisoformat,
    "day": date.fromisoformat,
    "is_preemptible": _parse_bool,
    "started_at": _parse_moment,
    "ended_at": _parse_moment,
    **dict.fromkeys(("seconds", "gpu_hours", "cost", *HOST_COST_COLUMNS), Decimal),
}


def _first_bad_rows(rows: list[tuple[int, dict[str, Any]]]) -> dict[str, int]:
    """The first line of each problem (`_PROBLEMS`) among parsed rows: keys looked up once."""
    from django.contrib.auth import get_user_model

    from scheduling.models import Flavor, NodePool
    from tenants.models import Project

    def ids(name: str) -> set[int]:
        return {row[name] for _, row in rows}

    project_teams = dict(
        Project.objects.filter(pk__in=ids("project_id")).values_list("pk", "team_id")
    )
    known = {
        "flavor": set(Flavor.objects.filter(pk__in=ids("flavor_id")).values_list("pk", flat=True)),
        "pool": set(NodePool.objects.filter(pk__in=ids("pool_id")).values_list("pk", flat=True)),
        "owner": set(
            get_user_model().objects.filter(pk__in=ids("owner_id")).values_list("pk", flat=True)
        ),
    }
    first: dict[str, int] = {}
    for line, row in rows:
        amounts = tuple(row[name] for name in ("seconds", *AMOUNTS))
        bad = {
            "project": project_teams.get(row["project_id"]) != row["team_id"],
            "flavor": row["flavor_id"] not in known["flavor"],
            "pool": row["pool_id"] not in known["pool"],
            "owner": row["owner_id"] not in known["owner"],
            "amounts": row["period"] != row["day"].replace(day=1)
            or row["ended_at"] < row["started_at"]
            or row["gpu_count"] < 0
            or any(not amount.is_finite() or amount < 0 for amount in amounts)
            or row["cpu_cost"] + row["memory_cost"] > row["cost"],
        }
        for name, is_bad in bad.items():
            if is_bad:
                first.setdefault(name, line)
    return first


def _ingest_with_orm(source: IO[str], *, first_line: int, columns: tuple[str, ...]) -> int:
    """`ingest_usage_csv` without COPY: parse and check in Python, write through the ORM."""
    rows = [
        (line, _parse_usage_row(values, line, columns))
        for line, values in enumerate(csv.reader(source), start=first_line)
        if values
    ]
    if not rows:
        return 0
    first_bad = _first_bad_rows(rows)
    if first_bad:
        raise _refused(first_bad)
    amounts = ("seconds", *AMOUNTS)
    ledger: dict[tuple[int, date], dict[str, Any]] = {}
    days: dict[tuple[Any, ...], dict[str, Decimal]] = defaultdict(
        lambda: dict.fromkeys(AMOUNTS, Decimal(0))
    )
    for _, row in rows:
        record = ledger.get((row["allocation_id"], row["period"]))
        if record is None:
            record = {k: v for k, v in row.items() if k != "day"}
            ledger[(row["allocation_id"], row["period"])] = record
        else:
            for name in amounts:
                record[name] += row[name]
            record["started_at"] = min(record["started_at"], row["started_at"])
            record["ended_at"] = max(record["ended_at"], row["ended_at"])
        day_key = (row["day"], row["period"], row["team_id"], row["project_id"])
        sums = days[(*day_key, row["flavor_id"], row["pool_id"])]
        for name in AMOUNTS:
            sums[name] += row[name]
    with transaction.atomic():
        existing = set(
            UsageRecord.objects.filter(
                allocation_id__in={allocation_id for allocation_id, _ in ledger}
            ).values_list("allocation_id", "period")
        )
        new = []
        for (allocation_id, period), record in ledger.items():
            if (allocation_id, period) not in existing:
                new.append(UsageRecord(**record))
                continue
            UsageRecord.objects.filter(allocation_id=allocation_id, period=period).update(
                **{name: F(name) + record[name] for name in amounts},
                started_at=Least("started_at", Value(record["started_at"])),
                ended_at=Greatest("ended_at", Value(record["ended_at"])),
            )
        UsageRecord.objects.bulk_create(new)
        for (day, period, team_id, project_id, flavor_id, pool_id), sums in days.items():
            key = {"team_id": team_id, "flavor_id": flavor_id, "pool_id": pool_id}
            _add(DailyUsage, {"day": day, "project_id": project_id, **key}, sums)
            _add(MonthlyUsage, {"period": period, "project_id": project_id, **key}, sums)
            _add(TeamMonthlyUsage, {"period": period, **key}, sums)
    return len(rows)


#: Rows per `ingest_usage_csv` call when importing a file: the staging table and the
#: per-(allocation, month) sums of one batch stay in session memory (`STAGE_BUFFERS`, work_mem).
IMPORT_BATCH_ROWS = 200_000


def import_usage_file(source: IO[str], *, batch_rows: int = IMPORT_BATCH_ROWS) -> int:
    """Import a usage CSV file in one transaction, `batch_rows` lines per `ingest_usage_csv`
    call; how many rows. The header names `USAGE_COLUMNS` in order, optionally followed by
    `HOST_COST_COLUMNS`; then one piece of usage per line. A bad row refuses the whole file
    with a `DomainError` naming its line: nothing is imported."""
    header = source.readline().lstrip("\ufeff").strip().replace(" ", "")  # a spreadsheet's BOM
    expected = ",".join(USAGE_COLUMNS)
    columns = {expected: USAGE_COLUMNS, ",".join(WITH_HOST_COSTS): WITH_HOST_COSTS}.get(header)
    if columns is None:
        raise DomainError(
            "invalid",
            f"Line 1: the header must name the columns in this order: {expected} "
            f"(optionally then {','.join(HOST_COST_COLUMNS)}). Nothing was imported.",
            fields={"header": f"line 1: expected {expected}"},
        )
    count = 0
    line = 2
    with transaction.atomic():
        while lines := list(itertools.islice(source, batch_rows)):
            count += ingest_usage_csv(io.StringIO("".join(lines)), first_line=line, columns=columns)
            line += len(lines)
    return count
