"""Queueing follow-up work by task name, after the current transaction commits.

The one door to the task queue for domain code: services, the cycle and the runtime call these
instead of importing Celery tasks (which import the services), so no domain module imports a
`tasks` module, and the scheduling floor can queue work that the runtime floor's tasks carry out.
Work is queued only after commit, so a worker never sees a row that is not there yet. A broker
that is down must not undo a committed decision: the failure is logged and the beat-driven
sweeps (cycle, sync, stuck-request sweeper) pick the work up later.

Two short-lived marks in the cache keep the queue to one task per piece of work:

* **cycle pending**: a burst of approvals queues one scheduling cycle, not one each. The first
  asker sets the mark with `add()` and queues the cycle; later askers find it set and queue
  nothing. The cycle clears it once it holds the scheduling lease, before it reads (so whatever
  committed before the clearing is in its snapshot, and whatever asks after it queues another
  cycle); a cycle that found the lease held leaves the mark, and the cycle holding the lease
  queues one more cycle after its own when the mark is set.
* **launch queued**: when a launch was queued, cleared when its task starts, expiring after
  LAUNCH_QUEUE_PATIENCE_SECONDS. The stuck-request sweeper leaves a request alone while its
  launch waits in a queue that moves: each launch task records as it starts when it started and
  when it was queued ("launch progress"). A marked launch counts as lost when it was queued more
  than STUCK_TRANSITION_SECONDS ago and either no launch has started for that long or one queued
  that much later has started (its message held by a worker that died, say).

Without the cache (down, or a blip) both fall back to queueing every time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

from celery import current_app
from django.conf import settings
from django.core.cache import cache
from django.db import transaction

log = logging.getLogger(__name__)

RUN_SCHEDULING_CYCLE = "scheduling.tasks.run_scheduling_cycle"
SEND_NOTICES = "scheduling.tasks.send_notices"
SEND_NOTIFICATION = "scheduling.tasks.send_notification"
SEND_WEBHOOK = "tenants.tasks.send_webhook"
SEND_PERSONAL_WEBHOOK = "tenants.tasks.send_personal_webhook"
LAUNCH_WORKLOAD = "runtime.tasks.launch_workload"
TERMINATE_WORKLOAD = "runtime.tasks.terminate_workload"
PREEMPT_WORKLOAD = "runtime.tasks.preempt_workload"
SCALE_WORKLOAD_TO_ZERO = "runtime.tasks.scale_workload_to_zero"
SET_WORKLOAD_DEADLINE = "runtime.tasks.set_workload_deadline"
PUSH_PROJECT_QUOTAS = "runtime.tasks.push_project_quotas"
SYNC_PROJECT_DATA = "runtime.tasks.sync_project_data"
REMOVE_PROJECT_DATA = "runtime.tasks.remove_project_data"
REFRESH_START_ESTIMATES = "scheduling.tasks.refresh_start_estimates"


CYCLE_PENDING_KEY = "scheduling:cycle-pending"
# Longer than a cycle may run (its task's time limit), so a mark outlives the cycle it asked
# for; should the cycle holding the lease die before it looks, the beat's cycle clears it.
CYCLE_PENDING_SECONDS = 60


def send(task_name: str, *args: Any) -> bool:
    """Queue the task now; the caller has committed (or runs outside a transaction).
    Returns False when the broker refused it (logged; the periodic sweeps retry)."""
    try:
        current_app.signature(task_name, args=args).delay()
    except Exception:
        log.exception("could not queue %s%r; the periodic sweeps will retry", task_name, args)
        return False
    return True


def _cache_call(what: str, call: Any, default: Any) -> Any:
    """A cache call whose failure must not stop the work: log it and use `default`."""
    try:
        return call()
    except Exception:
        log.warning("cache unavailable (%s); queueing without coalescing", what, exc_info=True)
        return default


def send_scheduling_cycle() -> None:
    """Queue a cycle unless one is already queued and has not started reading yet."""
    first = _cache_call(
        "cycle mark", lambda: cache.add(CYCLE_PENDING_KEY, time.time(), CYCLE_PENDING_SECONDS), True
    )
    if first and not send(RUN_SCHEDULING_CYCLE):
        clear_pending_cycle()  # nothing is queued: let the next asker try again


def clear_pending_cycle() -> None:
    """The cycle holds the lease and is about to read: later askers need a cycle of their own."""
    _cache_call("cycle mark", lambda: cache.delete(CYCLE_PENDING_KEY), None)


def is_cycle_pending() -> bool:
    return bool(_cache_call("cycle mark", lambda: cache.get(CYCLE_PENDING_KEY), False))


ESTIMATES_QUEUED_KEY = "scheduling:estimates-queued"
#: At most one refresh of the start estimates per this many seconds, however many cycles run.
ESTIMATES_EVERY_SECONDS = 30


def send_start_estimates() -> None:
    """After a cycle: refresh the queue's start estimates, throttled to one per window (the
    first asker sets the mark and queues; the mark expires by itself)."""
    first = _cache_call(
        "estimates mark",
        lambda: cache.add(ESTIMATES_QUEUED_KEY, time.time(), ESTIMATES_EVERY_SECONDS),
        True,
    )
    if first:
        send(REFRESH_START_ESTIMATES)


LAUNCH_PROGRESS_KEY = "runtime:launch-progress"


def launch_queued_key(request_id: int, attempt: int) -> str:
    return f"runtime:launch-queued:{request_id}:{attempt}"


def _send_launch(request_id: int, attempt: int) -> None:
    """Queue a launch and mark it queued (first, so a fast worker's start clears the mark)."""
    key = launch_queued_key(request_id, attempt)
    patience = settings.LAUNCH_QUEUE_PATIENCE_SECONDS
    _cache_call("launch mark", lambda: cache.set(key, time.time(), patience), None)
    if not send(LAUNCH_WORKLOAD, request_id, attempt):
        clear_launch_queued(request_id, attempt)


def clear_launch_queued(request_id: int, attempt: int) -> None:
    """The launch task started: from now on the request's own state says whether it is stuck.
    Records the queue's progress: when a launch last started, and the newest queue time of one
    that started."""
    key = launch_queued_key(request_id, attempt)

    def clear() -> None:
        queued_at = cache.get(key)
        cache.delete(key)
        progress = cache.get(LAUNCH_PROGRESS_KEY) or {}
        newest = max(float(queued_at or 0.0), float(progress.get("queued_at", 0.0)))
        progress = {"started_at": time.time(), "queued_at": newest}
        cache.set(LAUNCH_PROGRESS_KEY, progress, settings.LAUNCH_QUEUE_PATIENCE_SECONDS)

    _cache_call("launch mark", clear, None)


def queued_launches(keys: Iterable[tuple[int, int]]) -> set[tuple[int, int]]:
    """Which (request id, attempt) have a launch waiting in a moving queue: marked (not
    expired), and either queued lately or behind launches that are starting and not passed."""
    wanted = {launch_queued_key(pk, attempt): (pk, attempt) for pk, attempt in keys}
    if not wanted:
        return set()
    found = _cache_call("launch mark", lambda: cache.get_many([*wanted, LAUNCH_PROGRESS_KEY]), {})
    progress = found.pop(LAUNCH_PROGRESS_KEY, None) or {}
    now, patience = time.time(), settings.STUCK_TRANSITION_SECONDS
    moving = now - float(progress.get("started_at", 0.0)) <= patience
    passed_before = float(progress.get("queued_at", 0.0)) - patience
    return {
        wanted[key]
        for key, queued_at in found.items()
        if now - queued_at <= patience or (moving and queued_at >= passed_before)
    }


def enqueue_after_commit(task_name: str, *args: Any) -> None:
    """Queue after commit: a cycle coalesced, a launch marked (see above), the rest as asked."""
    transaction.on_commit(lambda: _send_now(task_name, *args))


def _send_now(task_name: str, *args: Any) -> None:
    if task_name == RUN_SCHEDULING_CYCLE:
        send_scheduling_cycle()
    elif task_name == LAUNCH_WORKLOAD:
        _send_launch(*args)
    else:
        send(task_name, *args)


def request_scheduling_cycle() -> None:
    """Something may have unblocked work (approval, cancel, completion, node change); one
    cycle is queued per burst of these (see "cycle pending" above)."""
    enqueue_after_commit(RUN_SCHEDULING_CYCLE)


def request_launch(request_id: int, attempt: int) -> None:
    enqueue_after_commit(LAUNCH_WORKLOAD, request_id, attempt)


def request_termination(request_id: int, attempt: int, reason: str) -> None:
    enqueue_after_commit(TERMINATE_WORKLOAD, request_id, attempt, reason)


def request_scale_to_zero(request_id: int, attempt: int, reason: str) -> None:
    enqueue_after_commit(SCALE_WORKLOAD_TO_ZERO, request_id, attempt, reason)


def request_deadline_change(request_id: int, attempt: int) -> None:
    """A lead extended the runtime, or the Job's pod started running: the Job's deadline
    becomes the max runtime from when the pod runs."""
    enqueue_after_commit(SET_WORKLOAD_DEADLINE, request_id, attempt)


def request_quota_push(*, team_id: int, project_id: int | None) -> None:
    """A project or quota was created or changed: the namespaces of the projects it covers are
    made ready (quota, limit range) on every cluster."""
    enqueue_after_commit(PUSH_PROJECT_QUOTAS, team_id, project_id)


def request_project_data_sync(project_id: int) -> None:
    """A workspace or secret changed: the project's claims and Secrets follow (ids only: a
    secret's values never travel through the broker)."""
    enqueue_after_commit(SYNC_PROJECT_DATA, project_id)


def request_project_data_removal(namespace: str, kind: str, names: list[str]) -> None:
    """A workspace or secret was deleted: its cluster objects go too."""
    enqueue_after_commit(REMOVE_PROJECT_DATA, namespace, kind, names)


def request_notices(notices: list[dict[str, Any]]) -> None:
    """The email and webhook messages of some notices, handed after the commit to one task that
    queues them (`scheduling.services.notifications.send_out`): the caller publishes one message
    and reads no webhook, however many there are."""
    enqueue_after_commit(SEND_NOTICES, notices)


def send_notification(
    recipients: list[str], subject: str, body: str, event: dict[str, Any]
) -> None:
    send(SEND_NOTIFICATION, recipients, subject, body, event)


def send_webhook(
    webhook_id: int | None, subject: str, body: str, link: str, event: dict[str, Any]
) -> None:
    """One notice to one webhook (None: the NOTIFICATION_WEBHOOK_URL setting's), a task each, so
    a receiver that fails is retried alone (ids only: a webhook's URL is a credential)."""
    send(SEND_WEBHOOK, webhook_id, subject, body, link, event)


def send_personal_webhook(
    user_id: int, subject: str, body: str, link: str, event: dict[str, Any]
) -> None:
    """One notice to one user's own webhook (the user's id only: the URL is a credential)."""
    send(SEND_PERSONAL_WEBHOOK, user_id, subject, body, link, event)


def send_launch(request_id: int, attempt: int) -> None:
    """The cycle's admission, acted on after its own commit."""
    _send_launch(request_id, attempt)


def send_preemption(request_id: int, attempt: int) -> None:
    """The cycle's preemption, acted on after its own commit: notice, then SIGTERM with grace."""
    send(PREEMPT_WORKLOAD, request_id, attempt)
