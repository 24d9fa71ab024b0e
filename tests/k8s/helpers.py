"""Spec factories and small waits for the test-bed tests."""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Iterator
from typing import Any

import pytest

from runtime.cluster.base import (
    ProjectSpec,
    SharingMode,
    Taint,
    Toleration,
    WorkloadKind,
    WorkloadSpec,
)
from scripts.testbed.cluster import (
    GPU_TAINT,
    NodeShape,
    Testbed,
    TestbedError,
    missing_binaries,
)

GPU_TOLERATION = Toleration.for_taint(
    Taint(key=GPU_TAINT["key"], value=GPU_TAINT["value"], effect="NoSchedule")
)
COMPLETE_DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"
COMPLETE_JITTER = "pod-complete.stage.kwok.x-k8s.io/jitter-delay"
FAIL_LABEL = "pod-container-running-failed.stage.kwok.x-k8s.io"
FAIL_PREFIX = "pod-container-running-failed.stage.kwok.x-k8s.io/"
_ids = itertools.count(1)


def runs_for(duration: str) -> dict[str, str]:
    """Pod annotations that make kwok complete the pod after `duration` (a Go duration)."""
    return {COMPLETE_DELAY: duration, COMPLETE_JITTER: duration}


def project(namespace: str, **quota: int | str) -> ProjectSpec:
    return ProjectSpec(
        team_slug="vision",
        project_slug="detection",
        namespace=namespace,
        quota=quota or {"requests.nvidia.com/gpu": 16},
    )


def job(
    namespace: str,
    *,
    pool: str = "a100-training",
    sharing: SharingMode = "exclusive",
    kind: WorkloadKind = "job",
    gpu_count: int = 1,
    request_id: str | None = None,
    attempt: int = 1,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    **changes: Any,
) -> WorkloadSpec:
    """A workload in `pool` that tolerates the GPU taint; kwok completes it after ~1-2 s unless
    `annotations` say otherwise (see `runs_for`)."""
    fields: dict[str, Any] = {
        "request_id": request_id or str(next(_ids)),
        "attempt": attempt,
        "team_slug": "vision",
        "project_slug": "detection",
        "namespace": namespace,
        "kind": kind,
        "image": "registry.example.com/ml/train:1.0",
        "sharing": sharing,
        "gpu_count": gpu_count,
        "command": ("python", "train.py"),
        "cpu": "1",
        "memory": "1Gi",
        "node_selector": {"gpu-portal/pool": pool},
        "tolerations": (GPU_TOLERATION,),
        "priority_class_name": "gpu-portal-normal",
        "max_runtime_seconds": 3600,
        "owner": "alice",
        "reason": "test bed",
        "extra_annotations": annotations or {},
        "extra_labels": labels or {},
    }
    fields.update(changes)
    return WorkloadSpec(**fields)


@contextlib.contextmanager
def kueue_testbed(nodes: list[NodeShape]) -> Iterator[Testbed]:
    """A control plane of its own with Kueue's controller and `nodes`, stopped on exit; fails
    (skips outside CI) when the binaries are missing."""
    from scripts.testbed.kueue import kueue_binary, start_kueue

    missing = [*missing_binaries(), *([] if kueue_binary().exists() else ["kueue"])]
    if missing:
        message = f"test-bed binaries missing: {', '.join(missing)} (make testbed-build)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    bed = Testbed()
    try:
        bed.start(nodes=nodes)
        start_kueue(bed)
    except TestbedError as exc:
        bed.stop()
        pytest.fail(f"the Kueue test bed did not start: {exc}")
    try:
        yield bed
    finally:
        bed.stop()
