"""Redis and PostgreSQL restarted mid-flow (each the test's own server): everything converges,
nothing is lost or duplicated. Both restarts are crashes (SIGKILL / `pg_ctl -m immediate`)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from django.db import connection

from scheduling.models import Flavor
from tests.faults.conftest import report, sizes
from tests.faults.pipeline import (
    TERMINAL,
    audit,
    status_counts,
    submit_and_approve,
    wait_until_settled,
)
from tests.support.personas import Org
from tests.support.services import PostgresCluster, RedisServer, postgres_available
from tests.support.services import postgres_cluster as start_postgres_cluster
from tests.support.worker import supervised, worker_to_start
from tests.support.worker import test_database_url as database_url

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

WORKER_ENV = {
    "SIMULATION_SPEED": "60",
    "STUCK_TRANSITION_SECONDS": "3",
    "STUCK_SWEEP_SECONDS": "3",
}
DOWN_SECONDS = 3.0


def wait_for_flow(ids: list[int], timeout: float = 120.0) -> None:
    """Until some work has started or finished while other work still waits for its launch
    (queued, admitted or launching), so that the fault cuts through the flow; fails the test if
    that never happens. The batch is queued before the worker starts and holds more requests
    than the 16 A100s: the last ones wait until the first ones end, seconds at the least. (On a
    loaded machine a sync can see a job only once it has ended, so `running` alone is no sign.)
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        counts = status_counts(ids)
        started = counts["running"] + sum(counts[s] for s in TERMINAL)
        waiting = counts["queued"] + counts["admitted"] + counts["launching"]
        if started and waiting:
            return
        time.sleep(0.1)
    raise AssertionError(f"no work started while other work waited: {dict(counts)}")


def unfinished(ids: list[int]) -> int:
    """Requests not (yet) succeeded or failed. Read after a fault began, a request counted here
    was in flight when it began: a finished request never moves again."""
    counts = status_counts(ids)
    return len(ids) - sum(counts[s] for s in TERMINAL)


def test_redis_restart_mid_flow_loses_and_duplicates_nothing(
    on_postgresql: None, org: Org, a100: Flavor, own_redis: RedisServer
) -> None:
    total = sizes("RESTART_REQUESTS", 40)
    with (
        worker_to_start(own_redis.url(), **WORKER_ENV) as worker,
        supervised(worker) as restarts,
    ):
        ids = submit_and_approve(org, a100, total // 2)
        worker.start()  # with more queued than the 16 A100s hold, work waits behind work
        wait_for_flow(ids)
        own_redis.stop()  # every queued message is gone with it (no persistence)
        in_flight_at_crash = unfinished(ids)
        # Work keeps arriving while the broker is down: the decisions stand, the follow-up
        # tasks cannot be queued.
        ids += submit_and_approve(org, a100, total - len(ids))
        time.sleep(DOWN_SECONDS)
        own_redis.start()
        restarted = time.monotonic()
        in_flight_at_restart = unfinished(ids)
        wait_until_settled(ids, timeout=180, log=worker.output)
        converge = time.monotonic() - restarted
    outcome = audit(ids)
    report(
        {
            "fault": "redis_restart",
            "down_seconds": DOWN_SECONDS,
            "in_flight_at_crash": in_flight_at_crash,
            "in_flight_at_restart": in_flight_at_restart,
            "worker_restarts_by_supervisor": len(restarts),
            "converge_seconds_after_restart": round(converge, 1),
            **outcome.figures,
        }
    )
    assert in_flight_at_crash, "every request had finished before Redis went down"
    assert in_flight_at_restart, "every request had finished before Redis came back"
    outcome.assert_clean()


@pytest.fixture
def own_postgres(on_postgresql: None, org: Org, a100: Flavor) -> Iterator[PostgresCluster]:
    """The test's data copied into a private PostgreSQL cluster, which the test process and
    the worker then use; the shared server is back in place for the test's teardown."""
    if not postgres_available():
        pytest.skip("PostgreSQL server binaries (initdb) are not installed")
    with start_postgres_cluster() as cluster:
        cluster.copy_database(database_url(), "faults")
        original = dict(connection.settings_dict)
        connection.close()
        connection.settings_dict.update(
            {"HOST": "127.0.0.1", "PORT": cluster.port, "NAME": "faults", "PASSWORD": ""}
        )
        try:
            yield cluster
        finally:
            connection.close()
            connection.settings_dict.clear()
            connection.settings_dict.update(original)


def test_postgresql_restart_mid_flow_loses_and_duplicates_nothing(
    own_postgres: PostgresCluster, org: Org, a100: Flavor, own_redis: RedisServer
) -> None:
    total = sizes("RESTART_REQUESTS", 40)
    env = {**WORKER_ENV, "DATABASE_URL": own_postgres.url("faults")}
    with (
        worker_to_start(own_redis.url(), **env) as worker,
        supervised(worker) as restarts,
    ):
        ids = submit_and_approve(org, a100, total // 2)
        worker.start()  # with more queued than the 16 A100s hold, work waits behind work
        wait_for_flow(ids)
        connection.close()
        own_postgres.restart(down_seconds=DOWN_SECONDS)  # a crash: no clean shutdown
        restarted = time.monotonic()
        # Read first thing after the restart: unfinished now means unfinished at the crash.
        in_flight_at_crash = unfinished(ids)
        ids += submit_and_approve(org, a100, total - len(ids))
        wait_until_settled(ids, timeout=180, log=worker.output)
        converge = time.monotonic() - restarted
    outcome = audit(ids)
    report(
        {
            "fault": "postgresql_restart",
            "down_seconds": DOWN_SECONDS,
            "in_flight_at_crash": in_flight_at_crash,
            "worker_restarts_by_supervisor": len(restarts),
            "converge_seconds_after_restart": round(converge, 1),
            **outcome.figures,
        }
    )
    assert in_flight_at_crash, "every request had finished before PostgreSQL went down"
    outcome.assert_clean()
