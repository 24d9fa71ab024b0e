"""`make run` on a database of the previous release: it migrates and starts.

A SQLite file, as `make run` keeps in var/, is migrated and seeded with a few days of history,
then taken back to the previous migration state (every app of ours one migration back), as a
database left by the previous release. There a user has changed a demo role, and the file has
no record of what the demo seeded (releases before the record kept none). The start-up path of
`make run` then runs twice: it must migrate to the present, adopt the demo objects as they are
and keep every row.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.db.migrations.loader import MigrationLoader

pytestmark = pytest.mark.integration

ROOT = Path(settings.BASE_DIR)
APPS = ["accounting", "runtime", "scheduling", "tenants"]  # from the top floor down
COUNTED = [
    "tenants_team",
    "tenants_project",
    "tenants_membership",
    "auth_user",
    "scheduling_gpurequest",
    "scheduling_flavor",
    "scheduling_quota",
    "accounting_price",
    "accounting_usagerecord",
]


def previous_migrations() -> dict[str, str]:
    """Each app's migration before its latest: the previous release's state."""
    graph = MigrationLoader(None, ignore_no_migrations=True).graph
    previous = {}
    for app in APPS:
        (leaf,) = graph.leaf_nodes(app)
        parents = [parent for parent in graph.node_map[leaf].parents if parent.key[0] == app]
        previous[app] = parents[0].key[1] if parents else "zero"
    return previous


def manage(env: dict[str, str], *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert result.returncode == 0, f"manage.py {' '.join(args)}:\n{result.stderr[-4000:]}"
    return result.stdout + result.stderr


def counts(database: Path) -> dict[str, int]:
    with sqlite3.connect(database) as db:
        return {
            table: db.execute(f"SELECT count(*) FROM {table}").fetchone()[0] for table in COUNTED
        }  # noqa: S608


def alice_roles(database: Path) -> list[str]:
    with sqlite3.connect(database) as db:
        rows = db.execute(
            "SELECT role FROM tenants_membership m JOIN auth_user u ON u.id = m.user_id "
            "WHERE u.username = 'alice'"
        )
        return [role for (role,) in rows]


@pytest.mark.timeout(900)
def test_make_run_migrates_a_previous_release_database_and_starts(tmp_path: Path) -> None:
    database = tmp_path / "portal.sqlite3"
    env = {
        **{key: value for key, value in os.environ.items() if key != "DATABASE_URL"},
        "DATABASE_URL": f"sqlite:///{database}",
        "DEMO_PASSWORD": "demo",
        "SECRET_KEY": "upgrade-test-" + "x" * 40,
    }
    # 1. The previous release's database: seeded, then one migration back in every app.
    manage(env, "migrate", "--noinput", "-v", "0")
    manage(env, "seed_demo", "--history-days", "3")
    for app, migration in previous_migrations().items():
        manage(env, "migrate", app, migration, "--noinput", "-v", "0")
    assert "[ ]" in manage(env, "showmigrations", *APPS)
    with sqlite3.connect(database) as db:
        db.execute("DELETE FROM tenants_auditevent WHERE action = 'demo.seeded'")
        db.execute(
            "UPDATE tenants_membership SET role = 'team_lead' WHERE user_id = "
            "(SELECT id FROM auth_user WHERE username = 'alice')"
        )
    before = counts(database)

    # 2. `make run`'s start-up path, twice.
    start = (
        "from portal.management.commands.run_portal import prepare_database; "
        "prepare_database(); prepare_database()"
    )
    output = manage(env, "shell", "-c", start)

    # 3. Migrated to the present, every row kept, the user's role kept, nothing refused.
    manage(env, "migrate", "--check")
    assert counts(database) == before
    assert alice_roles(database) == ["team_lead"]
    assert "could not seed" not in output, output
