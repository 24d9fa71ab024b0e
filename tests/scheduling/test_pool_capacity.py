"""`pool_capacity`: what submissions are checked against, counted in the database."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduling.models import GpuDevice, Node
from scheduling.selectors.catalog import pool_capacity
from tests.scheduling.conftest import Fleet
from tests.support.personas import Org

pytestmark = pytest.mark.django_db


def add_node(fleet: Fleet, name: str, gpus: int, memory_mib: int, **fields: object) -> None:
    pool = fleet.l4_12g.pool
    node = Node.objects.create(pool=pool, name=name, gpu_model=fleet.l4_12g.gpu_model, **fields)
    GpuDevice.objects.bulk_create(
        GpuDevice(node=node, index=index, memory_mib=memory_mib) for index in range(gpus)
    )


def test_counts_schedulable_nodes_of_the_flavors_model(org: Org, fleet: Fleet) -> None:
    before = pool_capacity(flavor=fleet.l4_12g)
    add_node(fleet, "big", 6, 49_152)
    add_node(fleet, "cordoned", 8, 98_304, is_schedulable=False)
    add_node(fleet, "other-model", 8, 98_304)
    Node.objects.filter(name="other-model").update(gpu_model="T4")
    after = pool_capacity(flavor=fleet.l4_12g)
    assert after.max_gpus_per_node == max(before.max_gpus_per_node, 6)
    assert after.total_gpus == before.total_gpus + 6
    assert after.max_device_memory_mib == 49_152


def test_one_query_whatever_the_pool_size(org: Org, fleet: Fleet) -> None:
    for number in range(40):
        add_node(fleet, f"n{number}", 8, 24_576)
    with CaptureQueriesContext(connection) as captured:
        capacity = pool_capacity(flavor=fleet.l4_12g)
    assert len(captured) == 1
    assert capacity.max_gpus_per_node == 8


def test_mig_flavors_sum_the_slices(org: Org, fleet: Fleet) -> None:
    capacity = pool_capacity(flavor=fleet.mig_1g)
    layouts = GpuDevice.objects.filter(
        node__pool=fleet.mig_1g.pool, node__is_schedulable=True
    ).values_list("mig_layout", flat=True)
    expected = sum(int((layout or {}).get(fleet.mig_1g.mig_profile, 0)) for layout in layouts)
    assert capacity.mig_slices_total[fleet.mig_1g.mig_profile] == expected > 0
