"""The Celery app: its beat schedule, delivery settings and a task safe to run twice.

Run inline here; a real worker process on a real Redis is `tests/scheduling/test_worker_e2e.py`.
"""

from __future__ import annotations

import pytest
from django.utils import timezone

from portal.celery import app
from scheduling import dispatch
from tenants.tasks import purge_expired_api_tokens
from tests.support.personas import Org


def test_beat_schedule_names_only_registered_tasks() -> None:
    app.loader.import_default_modules()
    for entry in app.conf.beat_schedule.values():
        assert entry["task"] in app.tasks, entry["task"]


def test_every_task_name_dispatch_queues_is_a_registered_task() -> None:
    """Domain code queues work by name (scheduling/dispatch.py); a renamed task must not turn
    those names into messages no worker runs."""
    app.loader.import_default_modules()
    names = {
        value
        for attr, value in vars(dispatch).items()
        if attr.isupper()
        and isinstance(value, str)
        and value.count(".") == 2
        and value.split(".")[1] == "tasks"
    }
    assert len(names) >= 10, names
    assert sorted(names - set(app.tasks)) == []


def test_tasks_ack_late_and_requeue_on_worker_loss() -> None:
    assert app.conf.task_acks_late is True
    assert app.conf.task_reject_on_worker_lost is True
    assert app.conf.worker_prefetch_multiplier == 1


@pytest.mark.django_db
def test_purge_expired_tokens_is_safe_to_run_twice(org: Org) -> None:
    from datetime import timedelta

    from knox.models import AuthToken

    AuthToken.objects.create(user=org.dev_a, expiry=timedelta(seconds=-5))
    AuthToken.objects.create(user=org.dev_a, expiry=timedelta(hours=1))
    assert purge_expired_api_tokens() == 1
    assert purge_expired_api_tokens() == 0
    assert AuthToken.objects.filter(user=org.dev_a, expiry__gt=timezone.now()).count() == 1
