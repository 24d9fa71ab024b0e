"""Reading Nodes: inventory from a Node, the GPUs of NVIDIA's DRA driver from its
ResourceSlices, and the GPUs that pods the portal did not create hold.

Pure functions over the client's V1 models and API-shaped dicts, like `kubernetes_status`; the
Kubernetes client is imported for type checking only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import InvalidOperation
from typing import TYPE_CHECKING, Any

from runtime.cluster import dra_manifests, pod_manifests
from runtime.cluster.names import MANAGED_BY_LABEL, MANAGED_BY_VALUE
from runtime.cluster.quantities import quantity
from runtime.cluster.reports import HamiDevice, NodeInventory
from runtime.cluster.specs import Taint

if TYPE_CHECKING:
    from kubernetes import client as k8s

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
HAMI_REGISTER_ANNOTATION = "hami.io/node-nvidia-register"


def _int_quantity(value: str | None) -> int:
    if value is None:
        return 0
    try:
        return int(quantity(value))
    except (ValueError, ArithmeticError, InvalidOperation):
        return 0


def parse_hami_devices(annotation: str) -> tuple[HamiDevice, ...]:
    """Parse HAMi's `hami.io/node-nvidia-register` annotation.

    HAMi writes either JSON (a list of objects with id, count, devmem, devcore, type, numa,
    health) or, in older releases, `uuid,count,devmem,devcore,type,numa,health` records joined
    by `:`. Malformed records are skipped: inventory must not fail on one bad node.
    """
    text = annotation.strip()
    devices: list[HamiDevice] = []
    if text.startswith("["):
        try:
            records = json.loads(text)
        except ValueError:
            return ()
        for record in records if isinstance(records, list) else []:
            try:
                devices.append(
                    HamiDevice(
                        uuid=str(record["id"]),
                        split_count=int(record.get("count", 0)),
                        memory_mib=int(record.get("devmem", 0)),
                        cores_percent=int(record.get("devcore", 0)),
                        model=str(record.get("type", "")),
                        numa=int(record.get("numa", 0)),
                        healthy=bool(record.get("health", True)),
                    )
                )
            except (KeyError, TypeError, ValueError, AttributeError):
                continue
        return tuple(devices)
    for chunk in text.split(":"):
        fields = chunk.split(",")
        if len(fields) < 7:
            continue
        try:
            devices.append(
                HamiDevice(
                    uuid=fields[0],
                    split_count=int(fields[1]),
                    memory_mib=int(fields[2]),
                    cores_percent=int(fields[3]),
                    model=fields[4],
                    numa=int(fields[5]),
                    healthy=fields[6].strip().lower() == "true",
                )
            )
        except ValueError:
            continue
    return tuple(devices)


def node_inventory(node: k8s.V1Node) -> NodeInventory:
    """Map a V1Node onto `NodeInventory`: GPUs from GPU feature discovery labels, MIG and
    HAMi resources from allocatable, HAMi devices from the registration annotation."""
    metadata: Any = node.metadata
    labels = dict((metadata.labels if metadata else None) or {})
    annotations = (metadata.annotations if metadata else None) or {}
    spec: Any = node.spec
    status: Any = node.status
    allocatable = {k: str(v) for k, v in ((status.allocatable if status else None) or {}).items()}
    capacity = {k: str(v) for k, v in ((status.capacity if status else None) or {}).items()}
    taints = tuple(
        Taint(key=t.key, effect=t.effect, value=t.value or "")
        for t in (spec.taints if spec else None) or []
    )
    conditions = (status.conditions if status else None) or []
    ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
    hami = parse_hami_devices(annotations.get(HAMI_REGISTER_ANNOTATION, ""))
    mig = {
        name.removeprefix(pod_manifests.MIG_RESOURCE_PREFIX): _int_quantity(amount)
        for name, amount in sorted(allocatable.items())
        if name.startswith(pod_manifests.MIG_RESOURCE_PREFIX)
    }
    gpu_allocatable = _int_quantity(allocatable.get(pod_manifests.GPU_RESOURCE))
    if GPU_COUNT_LABEL in labels and labels[GPU_COUNT_LABEL].isdigit():
        gpu_count = int(labels[GPU_COUNT_LABEL])
    elif hami:
        gpu_count = len(hami)
    else:
        gpu_count = gpu_allocatable
    memory_label = labels.get(GPU_MEMORY_LABEL, "")
    if memory_label.isdigit():
        gpu_memory_mib: int | None = int(memory_label)
    elif hami:
        gpu_memory_mib = max(d.memory_mib for d in hami)
    else:
        gpu_memory_mib = None
    model = labels.get(GPU_PRODUCT_LABEL) or (hami[0].model if hami else None)
    cpu = allocatable.get("cpu")
    memory = allocatable.get("memory")
    return NodeInventory(
        name=str(metadata.name if metadata else ""),
        labels=labels,
        taints=taints,
        ready=ready,
        schedulable=ready and not (spec.unschedulable if spec else False),
        allocatable=allocatable,
        capacity=capacity,
        gpu_model=model,
        gpu_count=gpu_count,
        gpu_memory_mib=gpu_memory_mib,
        mig_devices=mig,
        hami_devices=hami,
        vgpu_slots=gpu_allocatable if hami else 0,
        cpu_millicores=_millicores(cpu) if cpu else 0,
        memory_mib=_mib(memory) if memory else 0,
    )


@dataclass(frozen=True, slots=True)
class DraGpus:
    """The GPUs a node's ResourceSlices offer: how many, the product, the largest memory."""

    count: int
    product: str | None
    memory_mib: int | None


def dra_gpus(slices: Sequence[Mapping[str, Any]]) -> dict[str, DraGpus]:
    """node → its GPUs, from the ResourceSlices (API-shaped dicts) of NVIDIA's DRA driver.

    Only devices of type `gpu` count (the driver also publishes MIG devices and channels); the
    product is the driver's `productName` in GPU feature discovery's spelling (`NVIDIA A100-SXM4-
    80GB` → `NVIDIA-A100-SXM4-80GB`), so the alias table maps it like a node label.
    """
    found: dict[str, list[tuple[str | None, int | None]]] = {}
    for item in slices:
        spec = item.get("spec") or {}
        node = spec.get("nodeName")
        if spec.get("driver") != dra_manifests.DRIVER or not node:
            continue
        for device in spec.get("devices") or ():
            attributes = device.get("attributes") or {}
            if (attributes.get("type") or {}).get("string", "gpu") != "gpu":
                continue
            product = (attributes.get("productName") or {}).get("string")
            memory = ((device.get("capacity") or {}).get("memory") or {}).get("value")
            try:
                memory_mib = int(quantity(str(memory)) / (1 << 20)) if memory else None
            except ValueError:
                memory_mib = None
            found.setdefault(str(node), []).append(
                (str(product).replace(" ", "-") if product else None, memory_mib)
            )
    return {
        node: DraGpus(
            count=len(devices),
            product=next((p for p, _ in devices if p), None),
            memory_mib=max((m for _, m in devices if m), default=None),
        )
        for node, devices in found.items()
    }


def with_dra_gpus(node: NodeInventory, gpus: DraGpus | None) -> NodeInventory:
    """The node with its DRA GPUs: their count, and model and memory where no label says."""
    if gpus is None:
        return node
    return replace(
        node,
        dra_gpu_count=gpus.count,
        gpu_count=node.gpu_count or gpus.count,
        gpu_model=node.gpu_model or gpus.product,
        gpu_memory_mib=node.gpu_memory_mib or gpus.memory_mib,
    )


# GPUs taken by others --------------------------------------------------------------------


def _gpu_amounts(resources: Any) -> dict[str, int]:
    """`nvidia.com/*` amounts of a container's limits or requests (quantity strings)."""
    return {
        name: _int_quantity(str(amount))
        for name, amount in (resources or {}).items()
        if name.startswith("nvidia.com/")
    }


def foreign_gpu_usage(pods: Sequence[k8s.V1Pod]) -> dict[str, dict[str, int]]:
    """node → GPU resources held by the pods on it that the portal did not create.

    A pod counts while it is bound and not finished; its containers' `nvidia.com/*` limits
    (requests when no limit: extended resources cannot be overcommitted) are added up. HAMi's
    `gpumem`/`gpucores` are per card, so they count once per `nvidia.com/gpu` of the
    container. Portal pods (the managed-by label) are left out: the portal's own allocations
    already hold their GPUs.
    """
    usage: dict[str, dict[str, int]] = {}
    for pod in pods:
        labels = (pod.metadata.labels if pod.metadata else None) or {}
        if labels.get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE:
            continue
        node = pod.spec.node_name if pod.spec is not None else None
        phase = pod.status.phase if pod.status is not None else None
        if not node or phase in ("Succeeded", "Failed"):
            continue
        for container in (pod.spec.containers if pod.spec is not None else None) or []:
            limits = container.resources.limits if container.resources else None
            requests = container.resources.requests if container.resources else None
            amounts = {**_gpu_amounts(requests), **_gpu_amounts(limits)}
            cards = max(1, amounts.get(pod_manifests.GPU_RESOURCE, 0))
            for name, amount in amounts.items():
                if name in (pod_manifests.VGPU_MEMORY_RESOURCE, pod_manifests.VGPU_CORES_RESOURCE):
                    amount *= cards
                if amount > 0:
                    held = usage.setdefault(node, {})
                    held[name] = held.get(name, 0) + amount
    return usage


# CPU and memory taken by others ------------------------------------------------------------

FOREIGN_CPU = "cpu_millicores"
FOREIGN_MEMORY = "memory_mib"


def _host_requests(containers: Any) -> tuple[int, int]:
    """(millicores, MiB) the containers request, each container's requests added up."""
    cpu = memory = 0
    for container in containers or []:
        requests = (container.resources.requests if container.resources else None) or {}
        if requests.get("cpu") is not None:
            cpu += _millicores(requests["cpu"])
        if requests.get("memory") is not None:
            memory += _mib(requests["memory"])
    return cpu, memory


def _millicores(value: object) -> int:
    """A CPU quantity in millicores (0 when malformed)."""
    try:
        return int(quantity(str(value)) * 1000)
    except (ValueError, ArithmeticError, InvalidOperation):
        return 0


def _mib(value: object) -> int:
    """A memory quantity in MiB, rounded down (0 when malformed)."""
    try:
        return int(quantity(str(value)) / (1 << 20))
    except (ValueError, ArithmeticError, InvalidOperation):
        return 0


def foreign_host_usage(pods: Sequence[k8s.V1Pod]) -> dict[str, dict[str, int]]:
    """node → the CPU (millicores) and memory (MiB) that pods the portal did not create request.

    What kube-scheduler counts against the node's allocatable: per pod, the larger of its
    containers' requests added up and its largest init container's, plus the pod's overhead;
    bound, unfinished pods without the portal's label only (the portal's own allocations hold
    theirs).
    """
    usage: dict[str, dict[str, int]] = {}
    for pod in pods:
        labels = (pod.metadata.labels if pod.metadata else None) or {}
        if labels.get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE or pod.spec is None:
            continue
        node = pod.spec.node_name
        phase = pod.status.phase if pod.status is not None else None
        if not node or phase in ("Succeeded", "Failed"):
            continue
        cpu, memory = _host_requests(pod.spec.containers)
        for init in pod.spec.init_containers or []:
            init_cpu, init_memory = _host_requests([init])
            cpu, memory = max(cpu, init_cpu), max(memory, init_memory)
        overhead = pod.spec.overhead or {}
        if overhead.get("cpu") is not None:
            cpu += _millicores(overhead["cpu"])
        if overhead.get("memory") is not None:
            memory += _mib(overhead["memory"])
        if cpu or memory:
            held = usage.setdefault(node, {})
            held[FOREIGN_CPU] = held.get(FOREIGN_CPU, 0) + cpu
            held[FOREIGN_MEMORY] = held.get(FOREIGN_MEMORY, 0) + memory
    return usage
