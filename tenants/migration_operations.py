"""Migration operations shared by the apps' migrations.

Kept small and stable: migrations are history, and they import this module as it is today.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations


def _on_postgresql(sql: str) -> Any:
    def run(apps: Any, schema_editor: Any) -> None:
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql)

    return run


def run_sql_on_postgresql(sql: str, reverse_sql: str) -> migrations.RunPython:
    """SQL that only PostgreSQL has (triggers, statistics, BRIN); SQLite (the demo) skips it."""
    return migrations.RunPython(_on_postgresql(sql), _on_postgresql(reverse_sql))
