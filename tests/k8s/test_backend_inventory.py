"""Inventory: the backend reads the fake GPU nodes (whole cards, MIG, HAMi vGPU) and the portal
maps them onto the demo pools."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.services.inventory import apply_inventory
from scheduling.demo import seed_demo_fleet
from scheduling.models import Flavor, GpuDevice, Node
from tenants.services.organisation import seed_demo_organisation

pytestmark = pytest.mark.k8s
DEMO_NODES = {"a100-training-1", "a100-training-2", "h100-mig-1", "l4-vgpu-1", "l4-vgpu-2"}


def test_inventory_reads_nodes_labels_taints_and_gpu_capacities(k8s_backend: Any) -> None:
    nodes = {n.name: n for n in k8s_backend.sync_inventory() if n.name in DEMO_NODES}
    assert set(nodes) == DEMO_NODES
    a100 = nodes["a100-training-1"]
    assert (a100.gpu_count, a100.gpu_model, a100.gpu_memory_mib) == (
        8,
        "NVIDIA-A100-SXM4-80GB",  # the backend reports what the cluster says
        81920,
    )
    assert a100.allocatable["nvidia.com/gpu"] == "8"
    assert a100.labels["gpu-portal/pool"] == "a100-training"
    assert a100.ready and a100.schedulable
    assert [(t.key, t.value, t.effect) for t in a100.taints] == [
        ("nvidia.com/gpu", "present", "NoSchedule")
    ]
    assert a100.cpu_millicores == 128_000 and a100.memory_mib == 2 * 1024 * 1024
    mig = nodes["h100-mig-1"]
    assert mig.gpu_count == 8
    assert mig.mig_devices == {"1g.10gb": 28, "3g.40gb": 8}
    l4 = nodes["l4-vgpu-1"]
    assert l4.gpu_count == 4 and l4.vgpu_slots == 40
    assert l4.gpu_memory_mib == 23034 and l4.gpu_model == "NVIDIA-L4"
    assert {(d.split_count, d.model) for d in l4.hami_devices} == {(10, "NVIDIA-NVIDIA L4")}
    assert l4.allocatable["nvidia.com/gpumem"] == str(4 * 23034)


@pytest.mark.django_db
def test_inventory_sync_maps_the_cluster_onto_the_demo_pools(k8s_backend: Any) -> None:
    seed_demo_fleet(teams=seed_demo_organisation(password="x"))
    counts = apply_inventory(k8s_backend.sync_inventory())
    assert counts == {"added": 0, "updated": 5, "lost": 0, "held_back": 0}
    nodes = {n.name: n for n in Node.objects.select_related("pool")}
    assert {name: n.pool.slug for name, n in nodes.items()} == {
        "a100-training-1": "a100-training",
        "a100-training-2": "a100-training",
        "h100-mig-1": "h100-mig",
        "l4-vgpu-1": "l4-vgpu",
        "l4-vgpu-2": "l4-vgpu",
    }
    assert all(n.is_schedulable and n.synced_at for n in nodes.values())
    # Real product labels (NVIDIA-A100-SXM4-80GB, ...) are stored as the flavors' short models.
    assert {name: n.gpu_model for name, n in nodes.items()} == {
        "a100-training-1": "A100-80G",
        "a100-training-2": "A100-80G",
        "h100-mig-1": "H100-80G",
        "l4-vgpu-1": "L4",
        "l4-vgpu-2": "L4",
    }
    assert set(Flavor.objects.values_list("gpu_model", flat=True)) <= {"A100-80G", "H100-80G", "L4"}
    assert GpuDevice.objects.filter(node__name="a100-training-1").count() == 8
    mig_layouts = GpuDevice.objects.filter(node__name="h100-mig-1").values_list(
        "mig_layout", flat=True
    )
    assert sum(layout.get("1g.10gb", 0) for layout in mig_layouts) == 28
    assert sum(layout.get("3g.40gb", 0) for layout in mig_layouts) == 8
    l4 = GpuDevice.objects.filter(node__name="l4-vgpu-1")
    assert sorted(l4.values_list("memory_mib", flat=True)) == [23034] * 4
    # HAMi's split count per card (its registration): the engine's share limit.
    assert list(l4.values_list("vgpu_split_count", flat=True)) == [10] * 4
    # Twice: same answer, nothing lost.
    assert apply_inventory(k8s_backend.sync_inventory()) == counts
