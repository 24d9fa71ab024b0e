"""The Celery app, with the whole beat schedule in one place."""

from __future__ import annotations

import os

from celery import Celery
from celery.schedules import crontab
from django.conf import settings

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("portal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


def kueue_schedule() -> dict[str, dict[str, object]]:
    """SCHEDULER=kueue: keep the cluster's Kueue objects in line with the portal's policy."""
    if settings.SCHEDULER != "kueue":
        return {}
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
