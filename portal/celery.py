"""The Celery app, with the whole beat schedule and the task queues in one place.

Two queues, so that a burst of launches cannot starve the work that keeps the portal in step
with the cluster:

* `celery` (the default): launches, terminations, notifications and other work queued by a
  request's life;
* `periodic`: every task the beat schedule sends (workload and inventory sync, the sweeps,
  reclaim, metering, …) and the scheduling cycle, however it is asked for.

A worker started without `-Q` consumes both (they are the app's `task_queues`); production runs
one worker Deployment per queue (the Helm chart's `templates/workers.yaml`, docs/operations.md).

On the `celery` queue the notices (their fan-out task, emails, webhooks) are sent at the lowest
priority, so a launch queued after them still starts first: someone waits for the launch, nobody
for the email. The Redis broker keeps one list per priority step and a worker takes from the
highest first (on Redis 0 is the highest and the default); each worker process takes one
message at a time (`CELERY_WORKER_PREFETCH_MULTIPLIER`), so no notice waits in a worker's buffer
ahead of a launch.
"""

from __future__ import annotations

import os

from celery import Celery
from celery.schedules import crontab
from django.conf import settings
from kombu import Queue

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("portal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

DEFAULT_QUEUE = "celery"
PERIODIC_QUEUE = "periodic"
# Queued on demand as well as by beat (a burst of approvals asks for one cycle): it admits what
# the launch queue then carries, so it must not wait behind that queue.
RUN_SCHEDULING_CYCLE = "scheduling.tasks.run_scheduling_cycle"
# The notice tasks (scheduling.dispatch names them), after everything else on their queue.
NOTICE_TASKS = (
    "scheduling.tasks.send_notices",
    "scheduling.tasks.send_notification",
    "tenants.tasks.send_webhook",
    "tenants.tasks.send_personal_webhook",
)
NOTICE_PRIORITY = 9


def kueue_schedule() -> dict[str, dict[str, object]]:
    """Keep every Kueue-mode cluster's Kueue objects in line with the portal's policy.

    Always scheduled: a cluster can be registered in Kueue mode, or switched to it, while beat
    runs, and beat reads its schedule once at start. With no Kueue-mode cluster the task reads
    the cluster list and returns 0, without contacting any cluster.
    """
    return {
        "reconcile-kueue-policy": {
            "task": "runtime.tasks.reconcile_kueue_policy",
            "schedule": settings.KUEUE_POLICY_SECONDS,
            "options": {"expires": settings.KUEUE_POLICY_SECONDS},
        }
    }


def demo_schedule() -> dict[str, dict[str, object]]:
    """The demo's simulated people (DEMO_TRAFFIC, on under `make run`); nothing otherwise."""
    if not settings.DEMO_TRAFFIC:
        return {}
    return {
        "demo-traffic": {
            "task": "portal.tasks.demo_traffic_step",
            "schedule": settings.DEMO_TRAFFIC_SECONDS,
            "options": {"expires": settings.DEMO_TRAFFIC_SECONDS},
        }
    }


# Business deadlines are columns checked by these periodic tasks, never Celery ETAs.
app.conf.beat_schedule = {
    "purge-expired-api-tokens": {
        "task": "tenants.tasks.purge_expired_api_tokens",
        "schedule": crontab(minute=17),
    },
    "scheduling-cycle": {
        "task": "scheduling.tasks.run_scheduling_cycle",
        "schedule": settings.SCHEDULING_CYCLE_SECONDS,
        "options": {"expires": settings.SCHEDULING_CYCLE_SECONDS},
    },
    "sync-workloads": {
        "task": "runtime.tasks.sync_workloads",
        "schedule": settings.WORKLOAD_SYNC_SECONDS,
        "options": {"expires": settings.WORKLOAD_SYNC_SECONDS},
    },
    "sync-inventory": {
        "task": "runtime.tasks.sync_inventory",
        "schedule": 60.0,
    },
    "record-utilisation": {
        "task": "runtime.tasks.record_utilisation",
        "schedule": settings.SAMPLE_INTERVAL_SECONDS,
        "options": {"expires": settings.SAMPLE_INTERVAL_SECONDS},
    },
    "enforce-reclaim-policies": {
        "task": "runtime.tasks.enforce_reclaim_policies",
        "schedule": settings.RECLAIM_INTERVAL_SECONDS,
        "options": {"expires": settings.RECLAIM_INTERVAL_SECONDS},
    },
    "sweep-stuck-requests": {
        "task": "runtime.tasks.sweep_stuck_requests",
        "schedule": settings.STUCK_SWEEP_SECONDS,
    },
    "expire-stale-approvals": {
        "task": "scheduling.tasks.expire_stale_approvals",
        "schedule": 300.0,
    },
    "approve-deferred-requests": {
        "task": "scheduling.tasks.approve_deferred_requests",
        "schedule": settings.SCHEDULING_CYCLE_SECONDS,
        "options": {"expires": settings.SCHEDULING_CYCLE_SECONDS},
    },
    "meter-usage": {
        "task": "accounting.tasks.meter_usage_task",
        "schedule": settings.USAGE_METERING_SECONDS,
        "options": {"expires": settings.USAGE_METERING_SECONDS},
    },
    "check-budgets": {
        "task": "accounting.tasks.check_budgets_task",
        "schedule": 300.0,
        "options": {"expires": 300},
    },
    **kueue_schedule(),
    **demo_schedule(),
}

app.conf.task_default_queue = DEFAULT_QUEUE
app.conf.task_queues = (Queue(DEFAULT_QUEUE), Queue(PERIODIC_QUEUE))
app.conf.task_routes = {
    **{
        name: {"queue": PERIODIC_QUEUE}
        for name in sorted(
            {str(entry["task"]) for entry in app.conf.beat_schedule.values()}
            | {RUN_SCHEDULING_CYCLE}
        )
    },
    **{name: {"queue": DEFAULT_QUEUE, "priority": NOTICE_PRIORITY} for name in NOTICE_TASKS},
}
