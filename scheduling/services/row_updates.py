"""Write different values to many rows of one table in one statement (PostgreSQL).

`bulk_update` says the same with one `CASE WHEN` branch per row and field: Django builds and
resolves those expressions one by one, psycopg scans the statement for one placeholder per
value, and PostgreSQL parses it all; array parameters (`unnest(%s::text[], …)`) are quoted
element by element in Python. Here the rows travel as one JSON document, quoted once, and the
statement stays a few hundred characters whatever the row count:

    UPDATE t AS r SET a = v.a, b = v.b
    FROM jsonb_to_recordset(%s::jsonb) AS v(id bigint, a text, b integer)
    WHERE r.id = v.id [AND r.status = …] [AND ROW(r.a, r.b) IS DISTINCT FROM ROW(v.a, v.b)]
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from django.db import connection
from django.db.models import Field, Model

BATCH_ROWS = 10_000


def update_rows(
    model: type[Model],
    fields: Sequence[str],
    rows: Sequence[tuple[Any, ...]],
    *,
    status: str | None = None,
    only_if_different: bool = False,
) -> int:
    """Set `fields` of each row `(pk, *values)` of `rows`; returns the rows written.

    Values are what the fields hold in Python (a JSON field's value is the object itself).
    `status`: only rows still in that status are written (a row that moved meanwhile is left
    alone). `only_if_different`: rows whose stored values already equal the new ones are not
    written either, compared in the database (nothing is read back).
    """
    if not rows:
        return 0
    meta = model._meta
    columns = [
        _column(model, meta.pk.name if meta.pk else "id"),
        *(_column(model, name) for name in fields),
    ]
    quote = connection.ops.quote_name
    names = [quote(column.column) for column in columns]
    record = ", ".join(
        f"{name} {column.db_type(connection)}" for name, column in zip(names, columns, strict=True)
    )
    sql = (
        f"UPDATE {quote(meta.db_table)} AS r SET "  # noqa: S608 - model names
        + ", ".join(f"{name} = v.{name}" for name in names[1:])
        + f" FROM jsonb_to_recordset(%s::jsonb) AS v({record}) WHERE r.{names[0]} = v.{names[0]}"
    )
    tail: list[Any] = []
    if status is not None:
        sql += f" AND r.{quote(_column(model, 'status').column)} = %s"
        tail.append(status)
    if only_if_different:
        stored = ", ".join(f"r.{name}" for name in names[1:])
        new = ", ".join(f"v.{name}" for name in names[1:])
        sql += f" AND ROW({stored}) IS DISTINCT FROM ROW({new})"
    keys = [column.column for column in columns]
    written = 0
    with connection.cursor() as cursor:
        for start in range(0, len(rows), BATCH_ROWS):
            document = [
                dict(zip(keys, row, strict=True)) for row in rows[start : start + BATCH_ROWS]
            ]
            cursor.execute(sql, [json.dumps(document, default=_as_json), *tail])
            written += cursor.rowcount
    return written


def update_shared_json(
    model: type[Model], field: str, rows: Sequence[tuple[int, Any]], *, only_if_different: bool
) -> int:
    """Set the JSON field `field` of each row `(pk, value)` when many rows share few values (a
    cycle's blockers: one per shape of waiting request); returns the rows written.

    Each distinct value travels once, in a JSON list, and each row as its key and the place of
    its value in that list, so a cycle that leaves 36,000 requests waiting for 60 reasons sends
    60 documents, not 36,000:

        UPDATE t AS r SET f = d.shared -> v.at
        FROM (SELECT %s::jsonb AS shared) AS d,
             jsonb_to_recordset(%s::jsonb) AS v(id bigint, at integer)
        WHERE r.id = v.id [AND r.f IS DISTINCT FROM d.shared -> v.at]

    Rows given the same value object share it without comparing; equal values given as
    different objects share it too.
    """
    if not rows:
        return 0
    meta = model._meta
    quote = connection.ops.quote_name
    key = quote(_column(model, meta.pk.name if meta.pk else "id").column)
    column = quote(_column(model, field).column)
    place_of_object: dict[int, int] = {}
    place_of_text: dict[str, int] = {}
    refs = []
    for pk, value in rows:
        at = place_of_object.get(id(value))
        if at is None:
            text = json.dumps(value, sort_keys=True, default=_as_json)
            at = place_of_object[id(value)] = place_of_text.setdefault(text, len(place_of_text))
        refs.append({"id": pk, "at": at})
    sql = (
        f"UPDATE {quote(meta.db_table)} AS r SET {column} = d.shared -> v.at "  # noqa: S608
        "FROM (SELECT %s::jsonb AS shared) AS d, "
        "jsonb_to_recordset(%s::jsonb) AS v(id bigint, at integer) "
        f"WHERE r.{key} = v.id"
    )
    if only_if_different:
        sql += f" AND r.{column} IS DISTINCT FROM d.shared -> v.at"
    with connection.cursor() as cursor:
        cursor.execute(sql, ["[" + ",".join(place_of_text) + "]", json.dumps(refs)])
        return int(cursor.rowcount)


def _column(model: type[Model], name: str) -> Field[Any, Any]:
    field = model._meta.get_field(name)
    if not isinstance(field, Field) or not field.column:
        raise TypeError(f"{name} is not a column of {model._meta.db_table}")
    return field


def _as_json(value: Any) -> str:
    """Times and decimals as PostgreSQL reads them back, to the microsecond and the digit."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    raise TypeError(f"{type(value).__name__} has no JSON form for a row update")
