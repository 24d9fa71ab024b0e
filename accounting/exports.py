"""CSV and XLSX export of report rows, with spreadsheet formulas neutralised.

Both formats share `neutralise()`: a text cell that starts with `= + - @`, tab or CR gets a
leading apostrophe, so a team or project name can never run as a formula in the reader's
spreadsheet. In XLSX, amounts are written as numbers (not text) so that sums work; they are
`Decimal` in the portal and become the spreadsheet's floating point only in the file.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from openpyxl import Workbook

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
XLSX_CONTENT_TYPE = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"


def neutralise(value: Any) -> Any:
    """A text cell that a spreadsheet would run as a formula gets a leading apostrophe."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def rows_to_csv(rows: Iterable[dict[str, Any]], *, columns: list[str]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([neutralise(row.get(column, "")) for column in columns])
    return buffer.getvalue()


def _xlsx_cell(value: Any) -> Any:
    """Numbers stay numbers; text is neutralised and stored as a plain string, never a formula."""
    if isinstance(value, bool) or value is None:
        return "" if value is None else str(value)
    if isinstance(value, int | float | Decimal):
        return value
    return neutralise(str(value))


def rows_to_xlsx(rows: Iterable[dict[str, Any]], *, columns: list[str], title: str) -> bytes:
    """One sheet: a header row, then one row per report row, in `columns` order."""
    workbook = Workbook()
    sheet = workbook.active
    assert sheet is not None
    sheet.title = title[:31]
    sheet.append(columns)
    for row in rows:
        sheet.append([_xlsx_cell(row.get(column, "")) for column in columns])
        for cell in sheet[sheet.max_row]:
            if cell.data_type == "f":  # openpyxl reads a leading '=' as a formula: never here
                cell.data_type = "s"
    buffer = io.BytesIO()
    workbook.save(buffer)
    return buffer.getvalue()
