"""The catalogue services beyond what the API tests show: a change lets the queue move."""

from __future__ import annotations

from typing import Any

import pytest

from scheduling import catalog_services, dispatch
from scheduling.models import NodePool
from tests.scheduling.conftest import Fleet
from tests.support.personas import Org

pytestmark = pytest.mark.django_db


def test_a_changed_pool_requests_a_scheduling_cycle_after_commit(
    org: Org, fleet: Fleet, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    queued: list[str] = []
    monkeypatch.setattr(dispatch, "send", lambda task_name, *args: queued.append(task_name))
    pool = NodePool.objects.get(slug="a100-training")
    with django_capture_on_commit_callbacks(execute=True):
        catalog_services.update_node_pool(actor=org.admin, node_pool=pool, scoring=pool.scoring)
    assert queued == []  # nothing changed, nothing to move
    with django_capture_on_commit_callbacks(execute=True):
        catalog_services.update_node_pool(
            actor=org.admin, node_pool=pool, short_reserve_fraction=0.5
        )
    assert queued == [dispatch.RUN_SCHEDULING_CYCLE]
