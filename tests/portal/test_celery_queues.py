"""Periodic work has a queue of its own, so a burst of launches cannot starve it; on the
default queue the notices come after the launches."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import redis
import yaml
from django.conf import settings

from portal.celery import DEFAULT_QUEUE, NOTICE_PRIORITY, PERIODIC_QUEUE, app
from scheduling import dispatch
from scripts.testbed.helm import helm_binary, render

ROOT = Path(settings.BASE_DIR)


def queue_of(task_name: str) -> str:
    return str(app.amqp.router.route({}, task_name)["queue"].name)


def test_every_task_beat_sends_and_the_cycle_go_to_the_periodic_queue() -> None:
    for entry in app.conf.beat_schedule.values():
        assert queue_of(str(entry["task"])) == PERIODIC_QUEUE, entry["task"]
    assert queue_of(dispatch.RUN_SCHEDULING_CYCLE) == PERIODIC_QUEUE


def test_launches_and_the_rest_of_a_requests_life_stay_on_the_default_queue() -> None:
    for name in (
        dispatch.LAUNCH_WORKLOAD,
        dispatch.TERMINATE_WORKLOAD,
        dispatch.PREEMPT_WORKLOAD,
        dispatch.SEND_NOTICES,
        dispatch.SEND_NOTIFICATION,
        dispatch.SEND_WEBHOOK,
        dispatch.PUSH_PROJECT_QUOTAS,
    ):
        assert queue_of(name) == DEFAULT_QUEUE, name


NOTICES = (
    dispatch.SEND_NOTICES,
    dispatch.SEND_NOTIFICATION,
    dispatch.SEND_WEBHOOK,
    dispatch.SEND_PERSONAL_WEBHOOK,
)


def test_notices_are_sent_at_the_lowest_priority_and_launches_at_the_default() -> None:
    for name in NOTICES:
        assert app.amqp.router.route({}, name).get("priority") == NOTICE_PRIORITY, name
    for name in (dispatch.LAUNCH_WORKLOAD, dispatch.TERMINATE_WORKLOAD, dispatch.PREEMPT_WORKLOAD):
        assert app.amqp.router.route({}, name).get("priority") is None, name


@pytest.mark.filterwarnings("ignore::celery.exceptions.AlwaysEagerIgnored")  # a real broker
def test_a_launch_queued_after_notices_is_taken_from_the_broker_first(redis_url: str) -> None:
    redis.Redis.from_url(redis_url).flushdb()
    with app.connection_for_write(redis_url) as connection:
        for name in NOTICES:
            app.send_task(name, args=([],), connection=connection)
        app.send_task(dispatch.LAUNCH_WORKLOAD, args=(7, 1), connection=connection)
        with connection.SimpleQueue(DEFAULT_QUEUE) as queue:
            taken = []
            for _ in range(len(NOTICES) + 1):
                message = queue.get(timeout=5)
                taken.append(message.headers["task"])
                message.ack()
    redis.Redis.from_url(redis_url).flushdb()
    assert taken == [dispatch.LAUNCH_WORKLOAD, *NOTICES]


def test_a_worker_started_without_q_consumes_both_queues() -> None:
    assert {queue.name for queue in app.conf.task_queues} == {DEFAULT_QUEUE, PERIODIC_QUEUE}


def test_deployed_workers_consume_every_queue_between_them() -> None:
    if not os.access(helm_binary(), os.X_OK) and os.environ.get("CI") != "true":
        pytest.skip(f"helm is not built ({helm_binary()}): run `make testbed-build`")
    consumed: set[str] = set()
    for doc in render():  # the Helm chart's objects, default values
        if doc["kind"] != "Deployment":
            continue
        for container in doc["spec"]["template"]["spec"]["containers"]:
            command = container["command"]
            if command[:4] == ["celery", "-A", "portal", "worker"]:
                consumed.update(command[command.index("-Q") + 1].split(","))
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    composed: set[str] = set()
    for service in compose["services"].values():
        command = service.get("command") or []
        if command[:4] == ["celery", "-A", "portal", "worker"]:
            composed.update(command[command.index("-Q") + 1].split(","))
    assert consumed == composed == {DEFAULT_QUEUE, PERIODIC_QUEUE}
