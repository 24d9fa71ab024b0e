from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from runtime.cluster.base import HamiDevice, NodeInventory
from runtime.services.inventory import apply_inventory
from scheduling.models import GpuDevice, Node
from scheduling.selectors.snapshot import build_snapshot
from tenants.models import AuditEvent
from tests.scheduling.conftest import Fleet

pytestmark = pytest.mark.django_db


def reported(name: str, pool: str, **kwargs: object) -> NodeInventory:
    values: dict[str, object] = {
        "name": name,
        "labels": {"gpu-portal/pool": pool, "nvidia.com/gpu.product": "A100-80G"},
        "taints": (),
        "ready": True,
        "schedulable": True,
        "allocatable": {"nvidia.com/gpu": "8"},
        "capacity": {"nvidia.com/gpu": "8"},
        "gpu_model": "A100-80G",
        "gpu_count": 8,
        "gpu_memory_mib": 81920,
    }
    values.update(kwargs)
    return NodeInventory(**values)  # type: ignore[arg-type]


def test_nodes_are_matched_onto_pools_by_labels_with_their_gpus(fleet: Fleet) -> None:
    counts = apply_inventory(
        [
            reported("gpu-a", "a100-training"),
            reported(
                "gpu-m",
                "h100-mig",
                gpu_model="H100-80G",
                gpu_count=2,
                mig_devices={"1g.10gb": 14},
            ),
            reported(
                "gpu-v",
                "l4-vgpu",
                gpu_model="L4",
                gpu_count=2,
                hami_devices=(
                    HamiDevice("GPU-1", 10, 23034, 100, "NVIDIA-L4", 0, True),
                    HamiDevice("GPU-2", 10, 23034, 100, "NVIDIA-L4", 0, True),
                ),
            ),
            reported("cpu-only", "none", gpu_count=0),
        ]
    )
    assert counts["added"] == 3
    assert Node.objects.get(name="gpu-a").pool.slug == "a100-training"
    assert GpuDevice.objects.filter(node__name="gpu-a").count() == 8
    layouts = list(
        GpuDevice.objects.filter(node__name="gpu-m").values_list("mig_layout", flat=True)
    )
    assert layouts == [{"1g.10gb": 7}, {"1g.10gb": 7}]
    memories = set(
        GpuDevice.objects.filter(node__name="gpu-v").values_list("memory_mib", flat=True)
    )
    assert memories == {23034}
    assert not Node.objects.filter(name="cpu-only").exists()


def test_a_node_that_disappears_stops_taking_work_and_a_resync_changes_nothing(
    fleet: Fleet,
) -> None:
    apply_inventory([reported("gpu-a", "a100-training")])
    assert Node.objects.get(name="gpu-a").is_schedulable
    again = apply_inventory([reported("gpu-a", "a100-training")])
    assert again["added"] == 0 and again["updated"] == 1
    # Every demo node and then gpu-a vanish from the cluster's answer.
    apply_inventory([])
    assert not Node.objects.filter(is_schedulable=True).exists()


def test_cordoned_node_is_not_schedulable(fleet: Fleet) -> None:
    apply_inventory([reported("gpu-a", "a100-training", schedulable=False)])
    assert Node.objects.get(name="gpu-a").is_schedulable is False


def test_a_fleet_of_2000_nodes_syncs_in_a_bounded_number_of_queries(
    fleet: Fleet, django_assert_max_num_queries: Any
) -> None:
    nodes = [reported(f"gpu-{i:04d}", "a100-training") for i in range(2000)]
    # SQLite takes at most 999 parameters a statement, so Django splits the bulk writes of
    # 2,000 nodes and 16,000 cards into about a hundred batches; still no query per node.
    bound = 160 if connection.vendor == "sqlite" else 40
    with django_assert_max_num_queries(bound):
        counts = apply_inventory(nodes)
    assert counts["added"] == 2000
    assert GpuDevice.objects.filter(node__name__startswith="gpu-").count() == 16000
    assert AuditEvent.objects.filter(action="node.discovered").count() == 2000
    # A resync that finds nothing new stamps the nodes and rewrites no card.
    nodes[0] = reported("gpu-0000", "a100-training", gpu_count=4)
    with django_assert_max_num_queries(20):
        again = apply_inventory(nodes)
    assert again == {"added": 0, "updated": 2000, "lost": 0, "held_back": 0}
    assert GpuDevice.objects.filter(node__name="gpu-0000").count() == 4


def test_a_node_whose_problem_changes_is_audited_once_per_change(fleet: Fleet) -> None:
    no_plugin: dict[str, Any] = {"allocatable": {}}
    apply_inventory([reported("gpu-a", "a100-training", **no_plugin)])
    apply_inventory([reported("gpu-a", "a100-training", **no_plugin)])
    assert AuditEvent.objects.filter(action="node.held_back").count() == 1
    apply_inventory([reported("gpu-a", "a100-training")])
    assert Node.objects.get(name="gpu-a").held_back_reason == ""


def test_a_node_joins_a_pool_only_with_every_label_its_pods_select(fleet: Fleet) -> None:
    """Inventory and launch agree on a pool's nodes: a node missing the pool label, or a label
    of the pool's node selector, is in no pool, so the engine never plans work that the pod's
    nodeSelector would keep off that node."""
    pool = fleet.a100.pool
    pool.node_selector = {"nvidia.com/gpu.product": "A100-80G"}
    pool.save()
    labelled = reported("gpu-labelled", "a100-training")
    unlabelled = reported(
        "gpu-unlabelled", "a100-training", labels={"nvidia.com/gpu.product": "A100-80G"}
    )
    other_product = reported(
        "gpu-other",
        "a100-training",
        labels={"gpu-portal/pool": "a100-training", "nvidia.com/gpu.product": "H100-80G"},
    )
    apply_inventory([labelled, unlabelled, other_product])

    reported_names = ["gpu-labelled", "gpu-unlabelled", "gpu-other"]
    joined = Node.objects.filter(pool=pool, name__in=reported_names)
    assert list(joined.values_list("name", flat=True)) == ["gpu-labelled"]
    assert pool.node_labels == {
        "nvidia.com/gpu.product": "A100-80G",
        "gpu-portal/pool": "a100-training",
    }
    assert all(labelled.labels[key] == value for key, value in pool.node_labels.items())


def test_hamis_split_count_is_stored_per_card_and_reaches_the_engine(fleet: Fleet) -> None:
    def vgpu_node(split_count: int) -> NodeInventory:
        return reported(
            "gpu-v",
            "l4-vgpu",
            gpu_model="L4",
            gpu_count=2,
            hami_devices=tuple(
                HamiDevice(f"GPU-{i}", split_count, 23034, 100, "NVIDIA-L4", 0, True)
                for i in (1, 2)
            ),
        )

    apply_inventory([vgpu_node(10)])
    cards = GpuDevice.objects.filter(node__name="gpu-v")
    assert list(cards.values_list("vgpu_split_count", flat=True)) == [10, 10]
    apply_inventory([vgpu_node(4)])  # HAMi re-registered the cards with another split
    assert list(cards.values_list("vgpu_split_count", flat=True)) == [4, 4]
    snapshot = build_snapshot()
    limits = {d.index: d.vgpu_share_limit for d in snapshot.devices if d.node_id == "gpu-v"}
    assert limits == {0: 4, 1: 4}
