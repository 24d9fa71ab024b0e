"""`manage.py import_usage FILE.csv` adds usage to the ledger and every rollup, or refuses the
whole file naming the first bad line. Runs on PostgreSQL (COPY) and SQLite (ORM) alike."""

from __future__ import annotations

import io
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db.models import Sum

from accounting.models import DailyUsage, MonthlyUsage, TeamMonthlyUsage, UsageRecord
from accounting.selectors.usage import UsageQuery, usage_rows
from accounting.services.ingest import USAGE_COLUMNS
from tests.scheduling.conftest import Fleet
from tests.support.personas import Org

pytestmark = pytest.mark.django_db
HEADER = ",".join(USAGE_COLUMNS)


def line(
    allocation_id: int,
    day: str,
    org: Org,
    fleet: Fleet,
    hours: str,
    cost: str,
    change: dict[str, Any] | None = None,
) -> str:
    """One CSV row of `hours` GPU-hours of project A on an A100 from 08:00 on `day`."""
    values: dict[str, Any] = {
        "allocation_id": allocation_id,
        "period": day[:8] + "01",
        "day": day,
        "team_id": org.team_a.pk,
        "project_id": org.project_a.pk,
        "flavor_id": fleet.a100.pk,
        "pool_id": fleet.a100.pool_id,
        "owner_id": org.dev_a.pk,
        "gpu_count": 1,
        "is_preemptible": "f",
        "started_at": f"{day}T08:00:00+00:00",
        "ended_at": f"{day}T10:00:00+00:00",
        "seconds": int(Decimal(hours) * 3600),
        "gpu_hours": hours,
        "cost": cost,
    }
    values.update(change or {})
    return ",".join(str(values[column]) for column in USAGE_COLUMNS)


def write(tmp_path: Path, *rows: str, header: str = HEADER) -> str:
    path = tmp_path / "usage.csv"
    path.write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    return str(path)


def import_usage(path: str, *args: str) -> str:
    out = io.StringIO()
    call_command("import_usage", path, *args, stdout=out)
    return out.getvalue()


def totals(model: Any) -> tuple[Decimal, Decimal]:
    sums = model.objects.aggregate(h=Sum("gpu_hours"), c=Sum("cost"))
    return (
        Decimal(str(sums["h"] or 0)).quantize(Decimal("0.000001")),
        Decimal(str(sums["c"] or 0)).quantize(Decimal("0.000001")),
    )


def ledger_state() -> dict[str, Any]:
    return {
        "rows": sorted(
            UsageRecord.objects.values_list("allocation_id", "period", "gpu_hours", "cost")
        ),
        "monthly": totals(MonthlyUsage),
        "team_monthly": totals(TeamMonthlyUsage),
        "daily": totals(DailyUsage),
        "days": DailyUsage.objects.count(),
    }


def test_import_usage_adds_rows_to_the_ledger_and_every_rollup(
    tmp_path: Path, org: Org, fleet: Fleet
) -> None:
    path = write(
        tmp_path,
        line(1, "2026-01-30", org, fleet, "2", "5"),
        line(1, "2026-01-31", org, fleet, "3", "7.5"),  # same allocation and month: one row
        line(2, "2026-02-01", org, fleet, "1.5", "3.75", {"is_preemptible": "t"}),
    )

    output = import_usage(path)

    assert "Imported 3 usage rows" in output
    ledger = {
        (r.allocation_id, r.period): (r.gpu_hours, r.cost, r.is_preemptible)
        for r in UsageRecord.objects.all()
    }
    assert ledger == {
        (1, date(2026, 1, 1)): (Decimal(5), Decimal("12.5"), False),
        (2, date(2026, 2, 1)): (Decimal("1.5"), Decimal("3.75"), True),
    }
    total = (Decimal("6.5"), Decimal("16.25"))
    assert totals(MonthlyUsage) == totals(TeamMonthlyUsage) == totals(DailyUsage) == total
    assert DailyUsage.objects.count() == 3


def test_reports_see_imported_usage(tmp_path: Path, org: Org, fleet: Fleet) -> None:
    import_usage(
        write(
            tmp_path,
            line(1, "2026-01-30", org, fleet, "2", "5"),
            line(2, "2026-01-31", org, fleet, "4", "10"),
        )
    )

    january = date(2026, 1, 1)
    rows = usage_rows(
        user=org.finance,
        query=UsageQuery(month_from=january, month_to=january, group_by=("team", "flavor")),
    )

    assert len(rows) == 1
    assert Decimal(str(rows[0]["gpu_hours"])) == Decimal(6)
    assert Decimal(str(rows[0]["cost"])) == Decimal(15)


def test_importing_in_batches_adds_up_the_same(tmp_path: Path, org: Org, fleet: Fleet) -> None:
    path = write(
        tmp_path,
        line(1, "2026-01-30", org, fleet, "2", "5"),
        line(1, "2026-01-31", org, fleet, "3", "7.5"),
        line(2, "2026-01-31", org, fleet, "1", "2.5"),
    )

    import_usage(path, "--batch-rows", "1")

    assert UsageRecord.objects.get(allocation_id=1).gpu_hours == Decimal(5)
    assert totals(MonthlyUsage) == totals(DailyUsage) == (Decimal(6), Decimal(15))


@pytest.mark.parametrize(
    "change, field",
    [
        ({"project_id": 999_999}, "project"),
        ({"team_id": "team_b"}, "project"),  # a project outside the row's team
        ({"flavor_id": 999_999}, "flavor"),
        ({"pool_id": 999_999}, "pool"),
        ({"owner_id": 999_999}, "owner"),
        ({"cost": "-1"}, "amounts"),
        ({"period": "2026-02-01"}, "amounts"),  # not the day's month
        ({"ended_at": "2026-01-31T07:00:00+00:00"}, "amounts"),  # ends before it starts
        ({"seconds": "abc"}, "seconds"),
        ({"gpu_hours": "NaN"}, "amounts"),
        ({"day": "2026-01-32"}, "day"),
        ({"is_preemptible": "maybe"}, "is_preemptible"),
    ],
)
@pytest.mark.parametrize("batch_rows", ["200000", "1"])
def test_import_usage_refuses_a_bad_row_by_line_and_imports_nothing(
    tmp_path: Path, org: Org, fleet: Fleet, change: dict[str, Any], field: str, batch_rows: str
) -> None:
    import_usage(write(tmp_path, line(7, "2026-01-15", org, fleet, "1", "2.5")))
    before = ledger_state()
    if change.get("team_id") == "team_b":
        change = {"team_id": org.team_b.pk}
    path = write(
        tmp_path,
        line(1, "2026-01-30", org, fleet, "2", "5"),
        line(7, "2026-01-16", org, fleet, "1", "2.5"),  # would grow the earlier row
        line(2, "2026-01-31", org, fleet, "1", "2.5", change),  # line 4 of the file
        line(3, "2026-01-31", org, fleet, "1", "2.5"),
    )

    with pytest.raises(CommandError) as refused:
        import_usage(path, "--batch-rows", batch_rows)

    message = str(refused.value)
    assert "Line 4" in message, message
    assert "Nothing was imported" in message
    assert ledger_state() == before
    assert field in message or field == "amounts", message


def test_import_usage_refuses_a_file_without_the_header(
    tmp_path: Path, org: Org, fleet: Fleet
) -> None:
    row = line(1, "2026-01-30", org, fleet, "2", "5")

    with pytest.raises(CommandError, match="Line 1: the header must name the columns"):
        import_usage(write(tmp_path, row, header=row))
    assert not UsageRecord.objects.exists()


def test_import_usage_refuses_a_row_with_a_missing_value(
    tmp_path: Path, org: Org, fleet: Fleet
) -> None:
    short = line(2, "2026-01-31", org, fleet, "1", "2.5").rsplit(",", 1)[0]

    with pytest.raises(CommandError, match="Line 3:"):
        import_usage(write(tmp_path, line(1, "2026-01-30", org, fleet, "2", "5"), short))
    assert not UsageRecord.objects.exists() and not DailyUsage.objects.exists()


def test_import_usage_names_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="Cannot read"):
        import_usage(str(tmp_path / "absent.csv"))


def test_import_usage_help_documents_every_column() -> None:
    from accounting.management.commands.import_usage import Command

    help_text = Command().create_parser("manage.py", "import_usage").format_help()

    assert ",".join(USAGE_COLUMNS) in help_text
    for column in USAGE_COLUMNS:
        assert f"\n  {column} " in help_text


def test_import_usage_reads_a_spreadsheet_export_with_a_byte_order_mark(
    tmp_path: Path, org: Org, fleet: Fleet
) -> None:
    path = write(tmp_path, line(1, "2026-01-30", org, fleet, "2", "5"), header="\ufeff" + HEADER)

    assert "Imported 1 usage rows" in import_usage(path)
    assert UsageRecord.objects.get().gpu_hours == Decimal(2)
