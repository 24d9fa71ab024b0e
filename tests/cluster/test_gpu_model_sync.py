"""Inventory sync and launch specs use the portal's short model names, whatever the cluster says."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.cluster.base import NodeInventory
from runtime.services.inventory import apply_inventory, gpu_products
from scheduling.models import Node
from tests.scheduling.conftest import Fleet, fleet  # noqa: F401 — the fleet fixture

pytestmark = pytest.mark.django_db


def gfd_node(name: str, pool: str, product: str) -> NodeInventory:
    return NodeInventory(
        name=name,
        labels={"gpu-portal/pool": pool, "nvidia.com/gpu.product": product},
        taints=(),
        ready=True,
        schedulable=True,
        allocatable={"nvidia.com/gpu": "8"},
        capacity={"nvidia.com/gpu": "8"},
        gpu_model=product,
        gpu_count=8,
        gpu_memory_mib=81920,
    )


def test_inventory_stores_the_short_model_so_flavors_match_real_product_labels(
    fleet: Fleet,  # noqa: F811
) -> None:
    apply_inventory([gfd_node("gfd-a100", "a100-training", "NVIDIA-A100-SXM4-80GB")])
    node = Node.objects.get(name="gfd-a100")
    assert node.gpu_model == fleet.a100.gpu_model == "A100-80G"


def test_the_aliases_setting_maps_a_new_product(
    fleet: Fleet,  # noqa: F811
    settings: Any,
) -> None:
    settings.GPU_MODEL_ALIASES = {"NVIDIA-A100-SXM4-80GB-CUSTOM": "A100-80G"}
    apply_inventory([gfd_node("custom-a100", "a100-training", "NVIDIA-A100-SXM4-80GB-CUSTOM")])
    assert Node.objects.get(name="custom-a100").gpu_model == "A100-80G"
    assert "NVIDIA-A100-SXM4-80GB-CUSTOM" in gpu_products("A100-80G")


def test_a_flavor_without_a_model_pins_no_product() -> None:
    assert gpu_products("") == ()
