"""Spec factories shared by the cluster tests."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from runtime.cluster.base import (
    LimitRangeSpec,
    ProjectSpec,
    SharingMode,
    Taint,
    Toleration,
    WorkloadKind,
    WorkloadSpec,
)

NAMESPACE = "gp-vision-detection"


def workload(
    kind: WorkloadKind = "job", sharing: SharingMode = "exclusive", **changes: Any
) -> WorkloadSpec:
    """A fully populated spec: every optional field set, so builders show every branch."""
    per_mode: dict[str, dict[str, Any]] = {
        "exclusive": {"gpu_count": 2},
        "vgpu": {"gpu_count": 1, "vgpu_memory_mib": 12288, "vgpu_cores_percent": 25},
        "mig": {"gpu_count": 1, "mig_profile": "1g.10gb"},
    }
    extra = per_mode[sharing]
    spec = WorkloadSpec(
        request_id="812",
        attempt=1,
        team_slug="vision",
        project_slug="detection",
        namespace=NAMESPACE,
        kind=kind,
        image="registry.example.com/vision/train:1.4",
        sharing=sharing,
        command=("python", "train.py"),
        args=("--epochs", "3"),
        env={"WANDB_MODE": "offline", "PORTAL_REQUEST": "812"},
        cpu="4",
        memory="32Gi",
        scheduler_name="hami-scheduler" if sharing == "vgpu" else "default-scheduler",
        node_selector={"gpu-portal/pool": "a100-train"},
        gpu_products=("A100-80G", "NVIDIA-A100-80GB-PCIe", "NVIDIA-A100-SXM4-80GB"),
        tolerations=(
            Toleration.for_taint(Taint(key="nvidia.com/gpu", effect="NoSchedule")),
            Toleration.for_taint(
                Taint(key="gpu-portal/pool", value="a100-train", effect="NoSchedule")
            ),
        ),
        node_name="gpu-a100-01",
        priority_class_name="gpu-portal-high",
        max_runtime_seconds=7200,
        owner="alice",
        reason="admitted by the scheduler",
        extra_labels={"example.com/cost-centre": "cv"},
        extra_annotations={"example.com/ticket": "OPS-1"},
        **extra,
    )
    return replace(spec, **changes) if changes else spec


def project(**changes: Any) -> ProjectSpec:
    spec = ProjectSpec(
        team_slug="vision",
        project_slug="detection",
        namespace=NAMESPACE,
        quota={
            "requests.nvidia.com/gpu": 8,
            "nvidia.com/mig-1g.10gb": 4,
            "requests.nvidia.com/gpumem": 98304,
            "requests.cpu": "64",
            "limits.memory": "512Gi",
            "pods": 50,
        },
        limit_range=LimitRangeSpec(
            default_limits={"cpu": "2", "memory": "8Gi"},
            default_requests={"cpu": "500m", "memory": "2Gi"},
            max_limits={"memory": "256Gi"},
        ),
    )
    return replace(spec, **changes) if changes else spec
