"""GPUs through Dynamic Resource Allocation: a pool marked `allocation=dra` asks for its cards
with a ResourceClaimTemplate instead of the device plugin's `nvidia.com/gpu` extended resource.

The claim names the DeviceClass NVIDIA's DRA driver installs (`gpu.nvidia.com`: whole GPUs) and
CEL selectors for what the portal decided: the GPU model (the driver's `productName`, compared in
the spelling GPU feature discovery uses for node labels) and, when the portal placed the pod, the
very cards it chose (`index`) on that node. kube-scheduler allocates the claim; the pod carries a
reference to the template and its container a reference to the claim. Pure: no client here.
"""

from __future__ import annotations

from typing import Any

from runtime.cluster.names import workload_name
from runtime.cluster.specs import WorkloadSpec

DRIVER = "gpu.nvidia.com"
DEVICE_CLASS = "gpu.nvidia.com"
CLAIM_NAME = "gpus"
GROUP = "resource.k8s.io"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
TEMPLATE_PLURAL = "resourceclaimtemplates"

Manifest = dict[str, Any]


def _cel_list(values: list[str] | list[int]) -> str:
    return "[" + ", ".join(f"'{v}'" if isinstance(v, str) else str(v) for v in values) + "]"


def device_selectors(spec: WorkloadSpec) -> list[dict[str, Any]]:
    attributes = f"device.attributes['{DRIVER}']"
    expressions = []
    if spec.gpu_products:
        # The driver says "NVIDIA A100-SXM4-80GB", node labels "NVIDIA-A100-SXM4-80GB".
        products = sorted({p.replace(" ", "-").lower() for p in spec.gpu_products})
        expressions.append(
            f"{attributes}.productName.replace(' ', '-').lowerAscii() in {_cel_list(products)}"
        )
    if spec.node_name is not None and spec.device_indexes:
        expressions.append(f"{attributes}.index in {_cel_list(sorted(spec.device_indexes))}")
    return [{"cel": {"expression": expression}} for expression in expressions]


def claim_template_name(spec: WorkloadSpec) -> str:
    return workload_name(spec.request_id, spec.attempt)


def resource_claim_template(spec: WorkloadSpec, labels: dict[str, str]) -> Manifest:
    """One template per attempt: each pod of the attempt gets its own claim made from it."""
    request: dict[str, Any] = {
        "deviceClassName": DEVICE_CLASS,
        "allocationMode": "ExactCount",
        "count": spec.gpu_count,
    }
    selectors = device_selectors(spec)
    if selectors:
        request["selectors"] = selectors
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": claim_template_name(spec),
            "namespace": spec.namespace,
            "labels": labels,
        },
        "spec": {"spec": {"devices": {"requests": [{"name": CLAIM_NAME, "exactly": request}]}}},
    }


def with_claim(pod_spec: dict[str, Any], spec: WorkloadSpec) -> dict[str, Any]:
    """The pod spec asking for its GPUs through the claim template, not an extended resource."""
    pod_spec = {**pod_spec}
    pod_spec["resourceClaims"] = [
        {"name": CLAIM_NAME, "resourceClaimTemplateName": claim_template_name(spec)}
    ]
    containers = []
    for container in pod_spec["containers"]:
        container = {**container}
        resources = {**container.get("resources", {})}
        resources["claims"] = [{"name": CLAIM_NAME}]
        container["resources"] = resources
        containers.append(container)
    pod_spec["containers"] = containers
    return pod_spec
