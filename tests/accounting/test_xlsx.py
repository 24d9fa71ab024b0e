"""XLSX export of the usage and chargeback reports: numbers as numbers, formulas neutralised."""

from __future__ import annotations

import io
from decimal import Decimal
from typing import Any

import pytest
from openpyxl import load_workbook

from accounting.exports import rows_to_xlsx
from tests.accounting.test_api import get, usage
from tests.support.personas import Org

__all__ = ["usage"]

pytestmark = pytest.mark.django_db


def _sheet_rows(content: bytes) -> list[dict[str, Any]]:
    sheet = load_workbook(io.BytesIO(content)).active
    assert sheet is not None
    values = list(sheet.iter_rows(values_only=True))
    header = [str(cell) for cell in values[0]]
    return [dict(zip(header, row, strict=True)) for row in values[1:]]


def test_chargeback_xlsx_totals_match_the_json(org: Org, usage: Any) -> None:
    org.team_a.name = '=HYPERLINK("http://evil")'
    org.team_a.save()
    response = get(org.finance, "chargeback", group_by="team,flavor", export="xlsx")
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("application/vnd.openxmlformats")
    assert response["Content-Disposition"].endswith('.xlsx"')
    rows = _sheet_rows(response.content)
    assert {row["team"] for row in rows} == {'\'=HYPERLINK("http://evil")', "Team B"}
    assert all(isinstance(row["cost"], int | float) for row in rows), "amounts must be numbers"
    body = get(org.finance, "chargeback", group_by="team,flavor").json()
    assert sum(Decimal(str(row["cost"])) for row in rows) == Decimal(body["totals"]["cost"])
    assert sum(Decimal(str(row["gpu_hours"])) for row in rows) == Decimal(
        body["totals"]["gpu_hours"]
    )


def test_developer_usage_xlsx_is_their_own(org: Org, usage: Any) -> None:
    response = get(org.dev_a, "usage", group_by="project,user", export="xlsx")
    assert response.status_code == 200
    assert [row["user"] for row in _sheet_rows(response.content)] == ["dev_a"]


def test_unknown_export_format_is_400(org: Org, usage: Any) -> None:
    response = get(org.finance, "usage", export="pdf")
    assert response.status_code == 400
    assert "export" in response.json()["error"]["fields"]


@pytest.mark.parametrize("text", ["=1+1", "+1", "-1", "@SUM(A1)", "\tx", "\rx"])
def test_every_formula_start_is_neutralised_in_xlsx(text: str) -> None:
    content = rows_to_xlsx([{"name": text, "n": Decimal("1.5")}], columns=["name", "n"], title="t")
    sheet = load_workbook(io.BytesIO(content)).active
    assert sheet is not None
    # XML readers normalise a CR to LF; what matters is the leading apostrophe.
    assert sheet["A2"].value == "'" + text.replace("\r", "\n")
    assert sheet["A2"].data_type == "s"
    assert sheet["B2"].value == 1.5
