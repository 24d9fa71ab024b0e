"""`manage.py import_usage FILE.csv`: add usage from elsewhere to the ledger and its rollups."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from django.core.management.base import (
    BaseCommand,
    CommandError,
    CommandParser,
    DjangoHelpFormatter,
)

from accounting.services.ingest import (
    HOST_COST_COLUMNS,
    IMPORT_BATCH_ROWS,
    USAGE_COLUMNS,
    import_usage_file,
)
from tenants.errors import DomainError

HELP = f"""Add usage that the meter did not record (imports, backfills, other clusters) to the
usage ledger and its monthly, team-monthly and daily rollups, in one transaction.

FILE is CSV (comma-separated, UTF-8; '-' reads standard input). Its first line names the
columns, in this order:

  {",".join(USAGE_COLUMNS)}

optionally followed by ,{",".join(HOST_COST_COLUMNS)}, then one piece of usage per line:
what one allocation ran within one billing day.

  allocation_id   the allocation's id (a number; other clusters' ids are fine)
  period          first day of the billing month of `day` (YYYY-MM-01)
  day             the billing day (YYYY-MM-DD)
  team_id         id of an existing team
  project_id      id of an existing project of that team
  flavor_id       id of an existing flavor
  pool_id         id of an existing node pool
  owner_id        id of an existing user
  gpu_count       GPUs held (whole number, 0 or more)
  is_preemptible  t or f (true/false)
  started_at      start of the piece, ISO 8601 with offset (no offset: UTC)
  ended_at        end of the piece, not before started_at
  seconds         seconds run (decimal, 0 or more)
  gpu_hours       GPU-equivalent hours (decimal, 0 or more)
  cost            cost in the portal's currency (decimal, 0 or more): GPU + CPU + memory
  cpu_cost        (optional) the host CPU part of cost (decimal, 0 or more)
  memory_cost     (optional) the host memory part of cost; cpu_cost + memory_cost <= cost.
                  Without these two columns the whole cost is GPU cost.

A row with a value that is not of its type, an unknown id, a project outside its team, a
negative amount or a period that does not match its day refuses the whole file: the error
names the line and nothing is imported. Pieces of the same allocation and month add up to one
ledger row. Importing the same file twice counts its usage twice.

On PostgreSQL each batch is loaded with COPY into a temporary staging table and checked there;
elsewhere (SQLite) rows are checked in Python and written through the ORM. See
docs/accounting.md, "Importing usage"."""


class _HelpFormatter(DjangoHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Django's help layout, keeping the column table's line breaks."""


class Command(BaseCommand):
    help = HELP

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        return super().create_parser(prog_name, subcommand, **kwargs)

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="CSV file to import ('-' for standard input).")
        parser.add_argument(
            "--batch-rows",
            type=int,
            default=IMPORT_BATCH_ROWS,
            help=f"Rows checked and written per step (default {IMPORT_BATCH_ROWS:,}).",
        )

    def handle(self, *args: Any, file: str, batch_rows: int, **options: Any) -> None:
        try:
            if file == "-":
                count = import_usage_file(sys.stdin, batch_rows=batch_rows)
            else:
                with open(file, encoding="utf-8", newline="") as source:
                    count = import_usage_file(source, batch_rows=batch_rows)
        except OSError as error:
            raise CommandError(f"Cannot read {file}: {error.strerror}.") from error
        except DomainError as error:
            raise CommandError(f"{file}: {error.message}") from error
        if options["verbosity"] > 0:
            self.stdout.write(self.style.SUCCESS(f"Imported {count:,} usage rows from {file}."))
