"""Celery workers SIGKILLed again and again while requests flow: nothing lost, nothing twice.

Two workers run, both consuming every queue (one of them embeds beat; production runs the
`periodic` queue and beat apart, deploy/helm/gpu-portal); each kill hits a worker that is up
and consuming, at a random moment, and the worker is restarted at once while the other one
carries on — so killed tasks are redelivered to a live worker while their first run's effects
are half-written. A third of the kills wait for a worker that is running a launch, a third for
one running a scheduling cycle; the marks each worker leaves (`tests/support/task_marks.py`)
say which tasks every kill cut short, and the test fails unless launches and cycles were among
them.
"""

from __future__ import annotations

import random
import time
from collections import Counter

import pytest

from scheduling.models import Flavor
from tests.faults.conftest import report, sizes
from tests.faults.pipeline import audit, status_counts, submit_and_approve, wait_until_settled
from tests.support.personas import Org
from tests.support.services import RedisServer
from tests.support.worker import WorkerProcess, celery_worker

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

IN_FLIGHT = ("queued", "admitted", "launching", "running")
LAUNCH = "runtime.tasks.launch_workload"
CYCLE = "scheduling.tasks.run_scheduling_cycle"
# Kills in turn wait for a launch to be running, for a scheduling cycle, or for nothing.
TARGETS = (LAUNCH, CYCLE, None)
# 60× speed: a job starts within 0.1-0.3 s and runs 1-5 s; each launch takes 0.3 s before the
# workload exists, so kills land inside launches too.
WORKER_ENV = {
    "SIMULATION_SPEED": "60",
    "SIMULATED_LAUNCH_DELAY_SECONDS": "0.3",
    "STUCK_TRANSITION_SECONDS": "3",
    "STUCK_SWEEP_SECONDS": "3",
}


def wait_ready(workers: list[WorkerProcess], timeout: float = 60.0) -> list[WorkerProcess]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready = [w for w in workers if w.is_ready()]
        if ready:
            return ready
        time.sleep(0.1)
    raise AssertionError("no worker became ready:\n" + workers[0].output()[-4000:])


def choose_victim(
    workers: list[WorkerProcess], task: str | None, rng: random.Random, wait: float = 5.0
) -> WorkerProcess:
    """A ready worker; with `task`, one running it as soon as one does (within `wait` seconds,
    else any ready worker)."""
    deadline = time.monotonic() + wait
    while True:
        ready = wait_ready(workers)
        running = [w for w in ready if task in w.running_tasks()]
        if running or task is None or time.monotonic() > deadline:
            return rng.choice(running or ready)
        time.sleep(0.02)


@pytest.mark.timeout(900)  # 50 worker boots on 2 shared cores exceed the default 300 s
def test_workers_sigkilled_at_random_points_lose_and_duplicate_nothing(
    on_postgresql: None, org: Org, a100: Flavor, own_redis: RedisServer
) -> None:
    total, kills = sizes("REQUESTS", 200), sizes("KILLS", 50)
    rng = random.Random(sizes("SEED", 9))
    ids: list[int] = []
    stages_hit: Counter[str] = Counter()
    interrupted: Counter[str] = Counter()  # tasks the kills cut short, by name
    kills_inside_a_task = 0
    uptimes: list[float] = []
    with celery_worker(own_redis.url(), **WORKER_ENV) as with_beat:
        second = WorkerProcess(own_redis.url(), {**with_beat.env}, beat=False)
        second.start()
        workers = [with_beat, second]
        try:
            started = time.monotonic()
            for kill in range(kills):
                # Requests keep arriving while workers die: a share before each kill.
                ids += submit_and_approve(org, a100, total * (kill + 1) // kills - len(ids))
                time.sleep(rng.uniform(0.2, 2.0))
                victim = choose_victim(workers, TARGETS[kill % len(TARGETS)], rng)
                counts = status_counts(ids)
                stages_hit.update(s for s in IN_FLIGHT if counts[s])
                uptimes.append(time.monotonic() - victim.started_at)
                cut_short = victim.kill()
                interrupted.update(cut_short)
                kills_inside_a_task += bool(cut_short)
                victim.start(wait=False)
            last_kill = time.monotonic()
            converge = wait_until_settled(
                ids, timeout=240, log=lambda: with_beat.output() + second.output()
            )
        finally:
            second.stop()
    outcome = audit(ids)
    report(
        {
            "fault": "worker_sigkill",
            "kills_survived": kills,
            "kill_phase_seconds": round(last_kill - started, 1),
            "victim_uptime_seconds_mean": round(sum(uptimes) / max(1, len(uptimes)), 1),
            "converge_seconds_after_last_kill": round(converge, 1),
            "kills_with_requests_in": dict(stages_hit),
            "kills_inside_a_task": kills_inside_a_task,
            "tasks_cut_short": dict(interrupted),
            **outcome.figures,
        }
    )
    assert len(ids) == total
    # The kills landed mid-flow: a share of them inside a running launch and inside a running
    # scheduling cycle (a third of the kills wait for each; under load some find none in time).
    least = max(1, kills // 10)
    assert interrupted[LAUNCH] >= least and interrupted[CYCLE] >= least, dict(interrupted)
    outcome.assert_clean()
