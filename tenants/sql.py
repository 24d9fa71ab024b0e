"""Written-out statements for the few reads every submission makes.

The ORM compiles a query on every call, and on the submission path compiling cost more CPU
than running: those reads are written out here, in SQL both PostgreSQL and the demo's SQLite
accept. Everything else stays on the ORM.
"""

from __future__ import annotations

from typing import Any

from django.db import connection


def fetch_rows(sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def in_list(values: list[Any]) -> str:
    """Placeholders for `column IN (…)` with one parameter per value."""
    return ", ".join(["%s"] * len(values))
