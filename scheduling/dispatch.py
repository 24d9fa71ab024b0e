"""Queueing follow-up work after the current transaction commits, by task name.

Services call these instead of importing the Celery tasks (which import the services), and
queue only after commit, so a worker never sees a row that is not there yet. A broker that is
down must not undo a committed decision: the failure is logged and the beat-driven sweeps
(cycle, sync, stuck-request sweeper) pick the work up later.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import current_app
from django.db import transaction

log = logging.getLogger(__name__)


def enqueue_after_commit(task_name: str, *args: Any) -> None:
    def send() -> None:
        try:
            current_app.signature(task_name, args=args).delay()
        except Exception:
            log.exception("could not queue %s%r; the periodic sweeps will retry", task_name, args)

    transaction.on_commit(send)


def request_scheduling_cycle() -> None:
    """Something may have unblocked work (approval, cancel, completion, node change)."""
    enqueue_after_commit("scheduling.tasks.run_scheduling_cycle")


def request_launch(request_id: int, attempt: int) -> None:
    enqueue_after_commit("scheduling.tasks.launch_workload", request_id, attempt)


def request_termination(request_id: int, attempt: int, reason: str) -> None:
    enqueue_after_commit("scheduling.tasks.terminate_workload", request_id, attempt, reason)
