"""The daily rollup keeps one B-tree: its key, led by team and project, serves the reads too.

Bulk ingest adds or grows tens of thousands of daily rows per 200,000 pieces; each B-tree on the
table was paid per row. (team, day) and (project, day) go: a team's days are a prefix of the new
key, and the series selector adds the project's team to a project filter. Day ranges across
all teams read a BRIN index on `day` (rows arrive in day order, so it stays small and cheap to
keep); SQLite (the demo) has no BRIN and scans its few rows.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations, models

from tenants.migration_operations import run_sql_on_postgresql

CREATE_BRIN = (
    "CREATE INDEX IF NOT EXISTS daily_usage_day_brin ON accounting_dailyusage USING brin (day)"
)
DROP_BRIN = "DROP INDEX IF EXISTS daily_usage_day_brin"


class Migration(migrations.Migration):
    dependencies = [
        ("accounting", "0006_ledger_project_unindexed"),
        ("scheduling", "0007_request_list_indexes"),
        ("tenants", "0002_audit_append_only"),
    ]

    operations = [
        migrations.RemoveConstraint(model_name="dailyusage", name="daily_usage_one_per_key"),
        migrations.RemoveIndex(model_name="dailyusage", name="daily_usage_project_day_idx"),
        migrations.RemoveIndex(model_name="dailyusage", name="daily_usage_team_day_idx"),
        migrations.AddConstraint(
            model_name="dailyusage",
            constraint=models.UniqueConstraint(
                fields=("team", "project", "day", "flavor", "pool"),
                name="daily_usage_one_per_key",
                violation_error_message="This day already has a row for this key.",
            ),
        ),
        run_sql_on_postgresql(CREATE_BRIN, DROP_BRIN),
    ]
