from __future__ import annotations

from typing import Any

from scheduling.models import Flavor
from tenants.models import Project


def request_body(project: Project, flavor: Flavor, /, **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "project": project.pk,
        "flavor": flavor.pk,
        "gpu_count": 1,
        "kind": "job",
        "image": "registry.example.com/ml/pytorch:2.4",
        "command": ["python", "train.py"],
        "env": {"EPOCHS": "3"},
        "max_runtime_seconds": 3600,
        "priority": "normal",
        "reason": "experiment",
    }
    body.update(overrides)
    return body
