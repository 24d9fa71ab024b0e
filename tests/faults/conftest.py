"""Fault injection on PostgreSQL + a real Redis + a real Celery worker (docs/fault-tolerance.md).

Sizes come from the environment so a quick local run and the full CI run share one code path:
FAULTS_REQUESTS (200), FAULTS_KILLS (50), FAULTS_SEED, FAULTS_OUTAGE_SECONDS (60). Every test
here restarts only processes it started itself: its own redis-server, its own PostgreSQL cluster.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from scheduling.demo import seed_demo_fleet
from scheduling.models import Flavor, Quota
from tests.support.personas import Org
from tests.support.services import RedisServer


def sizes(name: str, default: int) -> int:
    return int(os.environ.get(f"FAULTS_{name}", default))


@pytest.fixture
def on_postgresql() -> None:
    """The suite is about PostgreSQL's behaviour (row locks, restarts): SQLite runs skip it."""
    if connection.vendor != "postgresql":
        pytest.skip("the fault suite needs PostgreSQL (set DATABASE_URL)")


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A redis-server of this test alone, so restarting it disturbs nobody else."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    server = RedisServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def a100(org: Org) -> Flavor:
    """The demo fleet (16 A100s on two nodes); team A's A100 quota is large enough that every
    request is guaranteed — no borrowing, hence no preemption to blur the counts."""
    seed_demo_fleet(teams={"vision": org.team_a, "speech": org.team_b})
    flavor = Flavor.objects.get(slug="a100-80g")
    amount = sizes("REQUESTS", 200) + 16
    Quota.objects.filter(team=org.team_a, flavor=flavor, project__isnull=True).update(
        guaranteed=amount, limit=amount
    )
    return flavor


def report(figures: dict[str, Any]) -> None:
    """Print the figures as one JSON line (shown with -s); FAULTS_REPORT=path appends it there."""
    line = json.dumps(figures, sort_keys=True)
    sys.stdout.write("FAULTS " + line + "\n")
    if path := os.environ.get("FAULTS_REPORT"):
        with open(path, "a", encoding="utf-8") as out:
            out.write(line + "\n")
