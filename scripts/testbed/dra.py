"""A stand-in DRA driver for the test bed: DeviceClasses and ResourceSlices for kwok nodes.

On a real cluster NVIDIA's DRA driver publishes, per node, one ResourceSlice of the GPUs NVML
finds (driver `gpu.nvidia.com`, attributes `type`, `productName`, `uuid`, `index`, capacity
`memory`), and its Helm chart installs the `gpu.nvidia.com` DeviceClass. kwok nodes have no GPUs
and no kubelet plugin, so this module writes the same objects from each node's declared cards.
kube-scheduler then allocates ResourceClaims against them exactly as it would on real nodes; kwok
starts the pods without preparing any device.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

DRIVER = "gpu.nvidia.com"
GROUP = "resource.k8s.io"
VERSION = "v1"


@dataclass(frozen=True)
class DraCards:
    """The GPUs a DRA node offers: how many, which product, how much memory each."""

    count: int
    product: str
    memory_gib: int


def device_classes() -> list[dict[str, Any]]:
    """The class the driver's chart installs: every whole GPU the driver publishes."""
    return [
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "DeviceClass",
            "metadata": {"name": DRIVER},
            "spec": {
                "selectors": [
                    {
                        "cel": {
                            "expression": f"device.driver == '{DRIVER}' && "
                            f"device.attributes['{DRIVER}'].type == 'gpu'"
                        }
                    }
                ]
            },
        }
    ]


def resource_slice(node_name: str, cards: DraCards) -> dict[str, Any]:
    devices = [
        {
            "name": f"gpu-{index}",
            "attributes": {
                "type": {"string": "gpu"},
                "productName": {"string": cards.product},
                "uuid": {"string": f"GPU-{node_name}-{index}"},
                "index": {"int": index},
            },
            "capacity": {"memory": {"value": f"{cards.memory_gib}Gi"}},
        }
        for index in range(cards.count)
    ]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def publish(api_client: Any, nodes: Iterable[tuple[str, DraCards]]) -> int:
    """Create the DeviceClass (once) and one ResourceSlice per node; returns slices written."""
    from kubernetes import client as k8s
    from kubernetes.client.exceptions import ApiException

    objects: Any = k8s.CustomObjectsApi(api_client)
    for device_class in device_classes():
        try:
            objects.create_cluster_custom_object(GROUP, VERSION, "deviceclasses", device_class)
        except ApiException as exc:
            if exc.status != 409:
                raise
    written = 0
    for node_name, cards in nodes:
        objects.create_cluster_custom_object(
            GROUP, VERSION, "resourceslices", resource_slice(node_name, cards)
        )
        written += 1
    return written
