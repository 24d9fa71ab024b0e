"""Two scheduling loops started at the same instant, each on its own database connection:
only one acts (the `scheduling-cycle` lease); a lease left by a killed process is taken over."""

from __future__ import annotations

import subprocess
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from scheduling.models import Allocation, Flavor, GpuRequest, SchedulerLease
from scheduling.services import cycle
from tests.faults.conftest import report, sizes
from tests.faults.pipeline import submit_and_approve
from tests.support.personas import Org

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def queued_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Approvals do not run a cycle inline: the loops under test must do all the admitting."""
    monkeypatch.setattr("scheduling.dispatch.enqueue_after_commit", lambda *args: None)


def test_two_loops_started_at_once_only_one_acts(
    on_postgresql: None,
    org: Org,
    a100: Flavor,
    queued_only: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rounds = sizes("LOOP_ROUNDS", 10)
    ids = submit_and_approve(org, a100, 24)  # 16 A100s: 16 admitted, 8 left waiting
    build = cycle.build_snapshot

    def slow_snapshot(**kwargs: Any) -> Any:
        time.sleep(0.3)  # both loops are inside a cycle at the same time
        return build(**kwargs)

    monkeypatch.setattr(cycle, "build_snapshot", slow_snapshot)
    barrier = threading.Barrier(2)
    ran: list[list[bool]] = [[] for _ in range(rounds)]
    launches: list[tuple[int, int]] = []
    errors: list[BaseException] = []

    def loop() -> None:
        try:
            for number in range(rounds):
                barrier.wait(timeout=30)
                result = cycle.run_cycle(
                    on_admit=lambda pk, attempt: launches.append((pk, attempt))
                )
                ran[number].append(result.ran)
                barrier.wait(timeout=30)
        except BaseException as error:  # reported below, in the test's thread
            errors.append(error)
            barrier.abort()
        finally:
            connection.close()  # each thread had its own connection

    threads = [threading.Thread(target=loop) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    cycles_ran = sum(flags.count(True) for flags in ran)
    allocations = Allocation.objects.filter(request_id__in=ids).count()
    report(
        {
            "fault": "two_scheduling_loops",
            "rounds": rounds,
            "cycles_attempted": 2 * rounds,
            "cycles_ran": cycles_ran,
            "admissions_written": allocations,
            "launches_queued": len(launches),
        }
    )
    assert all(sorted(flags) == [False, True] for flags in ran), ran  # one acts, one stands by
    assert allocations == 16 and len(launches) == 16
    assert len(set(launches)) == 16
    assert GpuRequest.objects.filter(pk__in=ids, attempt__gt=1).count() == 0


def _lease_held_by(holder: str) -> None:
    SchedulerLease.objects.update_or_create(
        name=cycle.LEASE_NAME,
        defaults={"holder": holder, "expires_at": timezone.now() + timedelta(seconds=60)},
    )


def test_lease_of_a_killed_process_on_this_host_is_taken_over_at_once(db: None) -> None:
    exited = subprocess.Popen(["true"])
    exited.wait()
    host, namespace = cycle._holder().split(":")[:2]
    _lease_held_by(f"{host}:{namespace}:{exited.pid}:deadbeef")
    assert cycle.acquire_lease() is not None


def test_lease_of_a_live_process_or_another_host_is_respected(db: None) -> None:
    host, namespace, pid = cycle._holder().split(":")[:3]
    _lease_held_by(f"{host}:{namespace}:{pid}:deadbeef")  # this very process: alive
    assert cycle.acquire_lease() is None
    exited = subprocess.Popen(["true"])
    exited.wait()
    _lease_held_by(f"elsewhere:{namespace}:{exited.pid}:deadbeef")  # cannot tell: wait
    assert cycle.acquire_lease() is None
    _lease_held_by(f"{host}:other-namespace:{exited.pid}:deadbeef")
    assert cycle.acquire_lease() is None


def test_lease_the_database_lost_mid_cycle_is_released_by_the_next_cycle(
    db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.db import OperationalError

    release = cycle.release_lease

    def database_gone(*args: Any, **kwargs: Any) -> None:
        raise OperationalError("the connection was closed by the server")

    monkeypatch.setattr(cycle, "release_lease", database_gone)
    assert cycle.run_cycle().ran
    assert SchedulerLease.objects.get(name=cycle.LEASE_NAME).expires_at > timezone.now()
    monkeypatch.setattr(cycle, "release_lease", release)  # the database is back
    assert cycle.run_cycle().ran  # not blocked for the lease's remaining minute
