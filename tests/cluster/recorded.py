"""Object shapes as the API server returns them, deserialised into the client's V1 models.

The JSON follows what kube-apiserver, the Job controller and the kubelet write (field names,
condition types and reasons, the scheduler's message format), trimmed to what the mapping reads
plus the fields the client's models require.
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client as k8s

NAMESPACE = "gp-vision-detection"
LABELS = {
    "app.kubernetes.io/managed-by": "gpu-portal",
    "gpu-portal/team": "vision",
    "gpu-portal/project": "detection",
    "gpu-portal/request": "812",
    "gpu-portal/attempt": "1",
}


def deserialize(data: dict[str, Any], klass: str) -> Any:
    """What the client makes of a response body: `ApiClient.deserialize` into `klass`."""
    return k8s.ApiClient().deserialize(json.dumps(data), klass, "application/json")


def _metadata(name: str, kind: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": NAMESPACE,
        "labels": {**LABELS, "gpu-portal/kind": kind},
        "creationTimestamp": "2026-12-01T10:00:00Z",
        "resourceVersion": "4711",
        **extra,
    }


def container_status(state: dict[str, Any], *, ready: bool = False, restarts: int = 0) -> Any:
    return {
        "name": "main",
        "image": "registry.example.com/vision/train:1.4",
        "imageID": "",
        "ready": ready,
        "restartCount": restarts,
        "started": "running" in state,
        "state": state,
        "lastState": {},
    }


def pod(
    *,
    phase: str,
    kind: str = "job",
    conditions: list[dict[str, Any]] | None = None,
    containers: list[dict[str, Any]] | None = None,
    node: str | None = "gpu-a100-01",
    name: str = "gpr-812-a1-x7k2p",
    created: str = "2026-12-01T10:00:01Z",
    deleted: str | None = None,
    **status: Any,
) -> k8s.V1Pod:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**_metadata(name, kind), "creationTimestamp": created},
        "spec": {
            "containers": [{"name": "main", "image": "registry.example.com/vision/train:1.4"}]
        },
        "status": {"phase": phase, "conditions": conditions or [], **status},
    }
    if node is not None:
        body["spec"]["nodeName"] = node
    if deleted is not None:
        body["metadata"]["deletionTimestamp"] = deleted
    if containers is not None:
        body["status"]["containerStatuses"] = containers
    return deserialize(body, "V1Pod")


def job(conditions: list[dict[str, Any]] | None = None, **status: Any) -> k8s.V1Job:
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata("gpr-812-a1", "job"),
        "spec": {"template": {"spec": {"containers": [{"name": "main", "image": "x"}]}}},
        "status": {"conditions": conditions or [], **status},
    }
    return deserialize(body, "V1Job")


def deployment(conditions: list[dict[str, Any]] | None = None, **status: Any) -> k8s.V1Deployment:
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata("gpr-812-a1", "notebook"),
        "spec": {
            "selector": {"matchLabels": LABELS},
            "template": {"spec": {"containers": [{"name": "main", "image": "x"}]}},
        },
        "status": {"conditions": conditions or [], **status},
    }
    return deserialize(body, "V1Deployment")


def condition(type_: str, status: str = "True", reason: str = "", message: str = "") -> Any:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastProbeTime": None,
        "lastTransitionTime": "2026-12-01T11:00:00Z",
    }


RUNNING = {"running": {"startedAt": "2026-12-01T10:02:00Z"}}
SCHEDULED = condition("PodScheduled")
UNSCHEDULABLE = condition(
    "PodScheduled",
    "False",
    "Unschedulable",
    "0/12 nodes are available: 4 Insufficient nvidia.com/gpu, 8 node(s) didn't match "
    "Pod's node affinity/selector. preemption: 0/12 nodes are available: 4 No preemption "
    "victims found for incoming pod, 8 Preemption is not helpful for scheduling.",
)


def waiting(reason: str, message: str) -> dict[str, Any]:
    return {"waiting": {"reason": reason, "message": message}}


def terminated(exit_code: int, reason: str, **extra: Any) -> dict[str, Any]:
    return {
        "terminated": {
            "exitCode": exit_code,
            "reason": reason,
            "startedAt": "2026-12-01T10:02:00Z",
            "finishedAt": "2026-12-01T10:45:00Z",
            **extra,
        }
    }


def node(
    name: str,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    allocatable: dict[str, str] | None = None,
    capacity: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    ready: bool = True,
    unschedulable: bool = False,
) -> k8s.V1Node:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, **(labels or {})},
            "annotations": annotations or {},
        },
        "spec": {"taints": taints or [], "unschedulable": unschedulable},
        "status": {
            "allocatable": allocatable or {},
            "capacity": capacity or allocatable or {},
            "conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": "True" if ready else "False"},
            ],
        },
    }
    return deserialize(body, "V1Node")
