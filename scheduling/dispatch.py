"""Queueing follow-up work by task name, after the current transaction commits.

The one door to the task queue for domain code: services, the cycle and the runtime call these
instead of importing Celery tasks (which import the services), so no domain module imports a
`tasks` module, and the scheduling floor can queue work that the runtime floor's tasks carry out.
Work is queued only after commit, so a worker never sees a row that is not there yet. A broker
that is down must not undo a committed decision: the failure is logged and the beat-driven
sweeps (cycle, sync, stuck-request sweeper) pick the work up later.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import current_app
from django.db import transaction

log = logging.getLogger(__name__)

RUN_SCHEDULING_CYCLE = "scheduling.tasks.run_scheduling_cycle"
SEND_NOTIFICATION = "scheduling.tasks.send_notification"
LAUNCH_WORKLOAD = "runtime.tasks.launch_workload"
TERMINATE_WORKLOAD = "runtime.tasks.terminate_workload"
SCALE_WORKLOAD_TO_ZERO = "runtime.tasks.scale_workload_to_zero"
SET_WORKLOAD_DEADLINE = "runtime.tasks.set_workload_deadline"
PUSH_PROJECT_QUOTAS = "runtime.tasks.push_project_quotas"


def send(task_name: str, *args: Any) -> None:
    """Queue the task now; the caller has committed (or runs outside a transaction)."""
    try:
        current_app.signature(task_name, args=args).delay()
    except Exception:
        log.exception("could not queue %s%r; the periodic sweeps will retry", task_name, args)


def enqueue_after_commit(task_name: str, *args: Any) -> None:
    transaction.on_commit(lambda: send(task_name, *args))


def request_scheduling_cycle() -> None:
    """Something may have unblocked work (approval, cancel, completion, node change)."""
    enqueue_after_commit(RUN_SCHEDULING_CYCLE)


def request_launch(request_id: int, attempt: int) -> None:
    enqueue_after_commit(LAUNCH_WORKLOAD, request_id, attempt)


def request_termination(request_id: int, attempt: int, reason: str) -> None:
    enqueue_after_commit(TERMINATE_WORKLOAD, request_id, attempt, reason)


def request_scale_to_zero(request_id: int, attempt: int, reason: str) -> None:
    enqueue_after_commit(SCALE_WORKLOAD_TO_ZERO, request_id, attempt, reason)


def request_deadline_change(request_id: int, attempt: int) -> None:
    """A lead extended the runtime: the running Job's deadline moves with it."""
    enqueue_after_commit(SET_WORKLOAD_DEADLINE, request_id, attempt)


def request_quota_push(*, team_id: int, project_id: int | None) -> None:
    """A quota changed: the namespace ResourceQuotas of the projects it covers follow."""
    enqueue_after_commit(PUSH_PROJECT_QUOTAS, team_id, project_id)


def request_notification(
    recipients: list[str], subject: str, body: str, event: dict[str, Any]
) -> None:
    enqueue_after_commit(SEND_NOTIFICATION, recipients, subject, body, event)


def send_launch(request_id: int, attempt: int) -> None:
    """The cycle's admission, acted on after its own commit."""
    send(LAUNCH_WORKLOAD, request_id, attempt)


def send_preemption(request_id: int, attempt: int) -> None:
    """The cycle's preemption, acted on after its own commit."""
    send(TERMINATE_WORKLOAD, request_id, attempt, "preempted")
