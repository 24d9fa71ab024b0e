"""Indexes for the request list, newest first, and what the planner needs to use them.

A developer's list filters on owner and team together. Every request of an owner is in one of
few teams, but PostgreSQL assumes the two columns independent, expects a handful of rows and
sorts them all instead of reading the owner's index in order (1.6 ms against 0.2 ms for a page
of 6,000 requests). Extended statistics on (owner, team) tell it they go together. SQLite (the
demo) has no such statistics.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import migrations, models

from tenants.migration_operations import run_sql_on_postgresql

CREATE_STATISTICS = (
    "CREATE STATISTICS IF NOT EXISTS gpu_request_owner_team_stats (dependencies) "
    "ON owner_id, team_id FROM scheduling_gpurequest"
)
DROP_STATISTICS = "DROP STATISTICS IF EXISTS gpu_request_owner_team_stats"


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0006_node_unschedulable_since"),
        ("tenants", "0002_audit_append_only"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddIndex(
            model_name="gpurequest",
            index=models.Index(
                models.F("owner"),
                models.OrderBy(models.F("created_at"), descending=True),
                models.OrderBy(models.F("id"), descending=True),
                name="gpu_request_owner_newest_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="gpurequest",
            index=models.Index(
                models.F("team"),
                models.OrderBy(models.F("created_at"), descending=True),
                models.OrderBy(models.F("id"), descending=True),
                name="gpu_request_team_newest_idx",
            ),
        ),
        run_sql_on_postgresql(CREATE_STATISTICS, DROP_STATISTICS),
    ]
