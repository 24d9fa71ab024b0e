"""Counting Celery task failures where the web tier's /metrics can read them; making a saved
project's namespace ready on the clusters; loading the cluster client before a worker forks."""

from __future__ import annotations

import logging
from importlib import import_module
from typing import Any

from django.db.models import F
from django.utils import timezone

from scheduling.dispatch import request_quota_push
from tenants.models import Project

log = logging.getLogger(__name__)


def record_task_failure(
    sender: Any = None, exception: BaseException | None = None, **_: Any
) -> None:
    from runtime.models import TaskFailureCount  # the app registry is ready at failure time

    name = getattr(sender, "name", str(sender))
    try:
        TaskFailureCount.objects.get_or_create(task_name=name)
        TaskFailureCount.objects.filter(task_name=name).update(
            failures=F("failures") + 1,
            last_failed_at=timezone.now(),
            last_error=repr(exception)[:2000],
        )
    except Exception:  # counting must never hide the original failure
        log.exception("could not count the failure of %s", name)


def prepare_saved_project(sender: Any, project: Project, **_: Any) -> None:
    """Receiver of `project_saved`: its namespace, quota and limit range are made ready after
    the commit (`runtime.tasks.push_project_quotas`), not at its first launch."""
    request_quota_push(team_id=project.team_id, project_id=project.pk)


def load_cluster_client(**_: Any) -> None:
    """Receiver of Celery's `worker_init`, in the worker's main process before it forks its
    pool: import the Kubernetes backend (the client's API classes and models), so that every
    pool process starts with it loaded. Loaded in each process instead, it was the first task's
    cost: 15-20 s per process for the first launch of a burst, four processes importing at once
    on a busy machine."""
    import_module("runtime.cluster.kubernetes")
