"""GPU product strings from the cluster ↔ the portal's short model names."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.cluster.gpu_models import (
    DEFAULT_GPU_MODEL_ALIASES,
    gpu_products_for,
    merged_aliases,
    normalise_gpu_model,
)
from runtime.cluster.kubernetes_manifests import job_manifest
from tests.cluster.specs import workload


@pytest.mark.parametrize(
    ("product", "model"),
    [
        ("NVIDIA-A100-SXM4-80GB", "A100-80G"),  # GPU feature discovery
        ("NVIDIA-A100-80GB-PCIe", "A100-80G"),
        ("NVIDIA-H100-80GB-HBM3", "H100-80G"),
        ("NVIDIA-L4", "L4"),
        ("NVIDIA-NVIDIA L4", "L4"),  # HAMi's device type
        ("nvidia-a100-pcie-40gb", "A100-40G"),  # case differs between GFD and HAMi
        ("A100-80G", "A100-80G"),  # already a short name: unchanged
        ("NVIDIA-B200", "B200-180G"),
        ("NVIDIA-H100-NVL", "H100-94G"),
        ("NVIDIA-A30", "A30"),
        ("NVIDIA-RTX-6000-Ada", "NVIDIA-RTX-6000-Ada"),  # unknown: kept as the cluster says it
    ],
)
def test_cluster_products_become_the_portal_short_models(product: str, model: str) -> None:
    assert normalise_gpu_model(product, DEFAULT_GPU_MODEL_ALIASES) == model


def test_no_product_means_no_model() -> None:
    assert normalise_gpu_model(None, DEFAULT_GPU_MODEL_ALIASES) is None
    assert normalise_gpu_model("", DEFAULT_GPU_MODEL_ALIASES) is None


def test_overrides_extend_and_replace_the_defaults() -> None:
    table = merged_aliases({"NVIDIA-B200": "B200-180G", "nvidia-l4": "L4-24G"})
    assert normalise_gpu_model("NVIDIA-B200", table) == "B200-180G"
    # Same product spelt differently: the override replaces the default, it does not add a rival.
    assert normalise_gpu_model("NVIDIA-L4", table) == "L4-24G"
    assert "NVIDIA-L4" not in table
    assert normalise_gpu_model("NVIDIA-A100-SXM4-80GB", table) == "A100-80G"


def test_products_of_a_model_include_every_form_factor_and_the_short_name() -> None:
    assert gpu_products_for("A100-80G", DEFAULT_GPU_MODEL_ALIASES) == (
        "A100-80G",
        "NVIDIA-A100-80GB-PCIe",
        "NVIDIA-A100-SXM4-80GB",
    )
    assert gpu_products_for("MI300X", DEFAULT_GPU_MODEL_ALIASES) == ("MI300X",)


def test_every_product_of_a_model_normalises_back_to_it() -> None:
    for model in set(DEFAULT_GPU_MODEL_ALIASES.values()):
        for product in gpu_products_for(model, DEFAULT_GPU_MODEL_ALIASES):
            assert normalise_gpu_model(product, DEFAULT_GPU_MODEL_ALIASES) == model


def test_a_pinned_model_becomes_a_required_node_affinity_on_the_product_label() -> None:
    pod: dict[str, Any] = job_manifest(
        workload(gpu_products=("A100-80G", "NVIDIA-A100-SXM4-80GB"))
    )["spec"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [
        {
            "matchExpressions": [
                {
                    "key": "nvidia.com/gpu.product",
                    "operator": "In",
                    "values": ["A100-80G", "NVIDIA-A100-SXM4-80GB"],
                }
            ]
        }
    ]
    assert "affinity" not in job_manifest(workload(gpu_products=()))["spec"]["template"]["spec"]
