"""The catalogue services beyond what the API tests show: a change lets the queue move, and
what requests were made for keeps its shape."""

from __future__ import annotations

from typing import Any

import pytest

from scheduling import dispatch
from scheduling.models import NodePool
from scheduling.services import catalog as catalog_services
from tenants.errors import ConflictError
from tests.scheduling.conftest import Fleet
from tests.support.factories import GpuRequestFactory
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


def test_a_flavor_with_requests_keeps_its_shape_but_may_be_retired(org: Org, fleet: Fleet) -> None:
    GpuRequestFactory(project=org.project_a, actor=org.dev_a, flavor=fleet.l4_6g)
    with pytest.raises(ConflictError) as refused:
        catalog_services.update_flavor(actor=org.admin, flavor=fleet.l4_6g, gpu_memory_mib=4096)
    assert refused.value.code == "flavor_in_use"
    catalog_services.update_flavor(actor=org.admin, flavor=fleet.l4_6g, is_active=False)
    fleet.l4_6g.refresh_from_db()
    assert (fleet.l4_6g.is_active, fleet.l4_6g.gpu_memory_mib) == (False, 6144)


def test_a_pool_with_flavors_keeps_its_sharing_mode(org: Org, fleet: Fleet) -> None:
    pool = fleet.mig_1g.pool
    with pytest.raises(ConflictError):
        catalog_services.update_node_pool(actor=org.admin, node_pool=pool, sharing_mode="vgpu")
    assert NodePool.objects.get(pk=pool.pk).sharing_mode == "mig"
