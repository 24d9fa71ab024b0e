"""What every benchmark shares: the figure lines it prints and the database it recreates."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlparse


def emit(metric: str, value: float, unit: str, text: str = "", **extra: Any) -> None:
    """One figure: `text` for a reader (if any), then `{"metric", "value", "unit", ...}`."""
    if text:
        print(text)
    line = {"metric": metric, "value": round(value, 6), "unit": unit, **extra}
    print(json.dumps(line), flush=True)


def recreate_database(url: str) -> None:
    """Drop and create the database `url` names (connecting to the `postgres` database).

    Only a name that starts with portal_bench: a benchmark must not drop a real database.
    """
    import psycopg
    from psycopg import sql

    parts = urlparse(url)
    name = parts.path.lstrip("/")
    if not name.startswith("portal_bench"):
        raise SystemExit(f"refusing to recreate {name!r}: the name must start with portal_bench")
    admin = parts._replace(path="/postgres").geturl()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
