"""GPU model names: the cluster's product strings mapped onto the portal's short model names.

Flavors, nodes and the engine speak of short models (`A100-80G`, `H100-80G`, `L4`) so that a
flavor means the same card whatever the form factor. Clusters report long product strings: GPU
feature discovery labels nodes `nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB`, HAMi registers
devices as `NVIDIA-NVIDIA L4`. Inventory sync stores the short name (`normalise_gpu_model`), and
a workload pinned to a model asks for every product string of it (`gpu_products_for`), so the
flavor lands on nodes labelled with the real product. Pure: the table comes in as an argument
(the Django side merges `settings.GPU_MODEL_ALIASES` over `DEFAULT_GPU_MODEL_ALIASES`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

#: The product label set by NVIDIA GPU feature discovery (and the fake test-bed nodes).
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"

#: Product string (as GFD or HAMi report it) → the portal's short model name. Add entries, or
#: override these, with the GPU_MODEL_ALIASES setting (a JSON object in the environment).
DEFAULT_GPU_MODEL_ALIASES: Mapping[str, str] = {
    "NVIDIA-A100-SXM4-80GB": "A100-80G",
    "NVIDIA-A100-80GB-PCIe": "A100-80G",
    "NVIDIA-A100-SXM4-40GB": "A100-40G",
    "NVIDIA-A100-PCIE-40GB": "A100-40G",
    "NVIDIA-H100-80GB-HBM3": "H100-80G",
    "NVIDIA-H100-PCIe": "H100-80G",
    "NVIDIA-H100-NVL": "H100-94G",
    "NVIDIA-GH200-480GB": "H100-96G",
    "NVIDIA-H200": "H200-141G",
    "NVIDIA-B200": "B200-180G",
    "NVIDIA-A30": "A30",
    "NVIDIA-L40S": "L40S",
    "NVIDIA-L4": "L4",
    "Tesla-T4": "T4",
}

_SPACES = re.compile(r"\s+")


def _canonical(product: str) -> str:
    """One spelling per product: HAMi's `NVIDIA-NVIDIA L4` and GFD's `NVIDIA-L4` become the same
    key, compared without case (GFD and HAMi disagree on `PCIe` vs `PCIE`)."""
    cleaned = _SPACES.sub("-", product.strip())
    while cleaned.upper().startswith("NVIDIA-NVIDIA-"):
        cleaned = cleaned[len("NVIDIA-") :]
    return cleaned.casefold()


def merged_aliases(
    overrides: Mapping[str, str] | None = None,
    defaults: Mapping[str, str] = DEFAULT_GPU_MODEL_ALIASES,
) -> dict[str, str]:
    """The default table with `overrides` on top (same product, the override wins)."""
    table = dict(defaults)
    for product, model in (overrides or {}).items():
        for existing in [p for p in table if _canonical(p) == _canonical(product)]:
            del table[existing]
        table[product] = model
    return table


def normalise_gpu_model(product: str | None, aliases: Mapping[str, str]) -> str | None:
    """The short model for a product string; names not in the table are returned unchanged, so
    a fleet already labelled with short names (the simulated one, older test beds) still works.
    """
    if not product:
        return None
    wanted = _canonical(product)
    for known, model in aliases.items():
        if _canonical(known) == wanted:
            return model
    return product.strip()


def gpu_products_for(model: str, aliases: Mapping[str, str]) -> tuple[str, ...]:
    """Every product string a node of `model` may carry, the short name itself included;
    sorted, so the manifest (and a retried launch) is the same every time."""
    products = {product for product, short in aliases.items() if short == model}
    products.add(model)
    return tuple(sorted(products))
