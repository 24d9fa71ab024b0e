"""Node inventory from V1Node shapes (whole cards, MIG slices, HAMi vGPU) and quantities."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kubernetes.utils import parse_quantity

from runtime.cluster.base import HamiDevice, Taint
from runtime.cluster.kubernetes_nodes import node_inventory, parse_hami_devices
from runtime.cluster.quantities import quantity
from tests.cluster import recorded as r

A100_GFD_LABELS = {
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
    "nvidia.com/gpu.memory": "81920",
    "nvidia.com/gpu.count": "8",
    "gpu-portal/pool": "a100-train",
}
LEGACY_HAMI = (
    "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true:"
    "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,1,false:"
)


def test_whole_card_node() -> None:
    node = r.node(
        "gpu-a100-01",
        labels=A100_GFD_LABELS,
        allocatable={
            "cpu": "95500m",
            "memory": "1031871236Ki",
            "nvidia.com/gpu": "8",
            "pods": "110",
        },
        taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
    )
    inventory = node_inventory(node)
    assert inventory.name == "gpu-a100-01"
    assert inventory.gpu_model == "NVIDIA-A100-SXM4-80GB"
    assert inventory.gpu_count == 8
    assert inventory.gpu_memory_mib == 81920
    assert inventory.mig_devices == {}
    assert inventory.hami_devices == ()
    assert inventory.vgpu_slots == 0
    assert inventory.taints == (Taint(key="nvidia.com/gpu", effect="NoSchedule"),)
    assert inventory.ready and inventory.schedulable
    assert inventory.allocatable["nvidia.com/gpu"] == "8"
    assert inventory.cpu_millicores == 95500
    assert inventory.memory_mib == 1031871236 // 1024
    assert inventory.labels["gpu-portal/pool"] == "a100-train"


def test_mig_node_counts_each_profile() -> None:
    node = r.node(
        "gpu-h100-02",
        labels={
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
            "nvidia.com/gpu.count": "8",
            "nvidia.com/mig.strategy": "mixed",
            "nvidia.com/gpu.memory": "81559",
        },
        allocatable={
            "nvidia.com/gpu": "0",
            "nvidia.com/mig-1g.10gb": "7",
            "nvidia.com/mig-3g.40gb": "2",
            "nvidia.com/mig-7g.80gb": "4",
        },
    )
    inventory = node_inventory(node)
    assert inventory.gpu_count == 8
    assert inventory.mig_devices == {"1g.10gb": 7, "3g.40gb": 2, "7g.80gb": 4}


def test_hami_vgpu_node_reads_devices_from_the_json_registration() -> None:
    devices = [
        {
            "id": f"GPU-{i}",
            "count": 10,
            "devmem": 23034,
            "devcore": 100,
            "type": "NVIDIA-NVIDIA L4",
            "numa": 0,
            "mode": "hami-core",
            "health": True,
            "index": i,
        }
        for i in range(4)
    ]
    node = r.node(
        "gpu-l4-07",
        annotations={
            "hami.io/node-nvidia-register": json.dumps(devices),
            "hami.io/node-handshake": "Reported 2026-12-01 10:00:00",
        },
        allocatable={"nvidia.com/gpu": "40", "cpu": "32", "memory": "128Gi"},
    )
    inventory = node_inventory(node)
    assert inventory.gpu_count == 4
    assert inventory.vgpu_slots == 40
    assert inventory.gpu_memory_mib == 23034
    assert inventory.gpu_model == "NVIDIA-NVIDIA L4"
    assert len(inventory.hami_devices) == 4
    assert inventory.hami_devices[0] == HamiDevice(
        uuid="GPU-0",
        split_count=10,
        memory_mib=23034,
        cores_percent=100,
        model="NVIDIA-NVIDIA L4",
        numa=0,
        healthy=True,
    )
    assert inventory.memory_mib == 128 * 1024


def test_hami_legacy_registration_format() -> None:
    devices = parse_hami_devices(LEGACY_HAMI)
    assert [d.uuid for d in devices] == [
        "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec",
        "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448",
    ]
    assert devices[0].memory_mib == 32768
    assert devices[0].split_count == 10
    assert devices[1].numa == 1
    assert [d.healthy for d in devices] == [True, False]


def test_malformed_hami_registrations_yield_what_parses() -> None:
    assert parse_hami_devices("") == ()
    assert parse_hami_devices("[not json") == ()
    assert parse_hami_devices('[{"count": 10}]') == ()
    assert len(parse_hami_devices("GPU-1,x,1,1,T,0,true:" + LEGACY_HAMI)) == 2


def test_cordoned_or_not_ready_nodes_are_not_schedulable() -> None:
    assert not node_inventory(r.node("a", unschedulable=True)).schedulable
    not_ready = node_inventory(r.node("b", ready=False))
    assert not not_ready.ready and not not_ready.schedulable


def test_cpu_only_node_has_no_gpus() -> None:
    inventory = node_inventory(r.node("cpu-01", allocatable={"cpu": "16", "memory": "64Gi"}))
    assert (inventory.gpu_count, inventory.gpu_model, inventory.gpu_memory_mib) == (0, None, None)


quantities = st.builds(
    lambda number, suffix: f"{number}{suffix}",
    st.decimals(min_value=0, max_value=10**6, places=3, allow_nan=False, allow_infinity=False),
    st.sampled_from(["", "m", "k", "M", "G", "Ki", "Mi", "Gi", "Ti", "e3", "E2", "n", "u"]),
)


@given(quantities)
def test_quantity_parser_agrees_with_the_clients(value: str) -> None:
    assert quantity(value) == parse_quantity(value)


@pytest.mark.parametrize("value", ["", "abc", "1.2.3", "5Zi", "--1"])
def test_quantity_parser_refuses_garbage(value: str) -> None:
    with pytest.raises(ValueError):
        quantity(value)
