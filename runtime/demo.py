"""What the demo's simulated cluster holds before anyone signs in."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from runtime.models import SimulatedWorkload


def seed_demo_zombie() -> None:
    """A workload left behind in the simulated cluster with no request: the first reclaim pass
    finds and removes it, so the demo shows zombie cleanup."""
    now = timezone.now()
    SimulatedWorkload.objects.get_or_create(
        namespace="gpu-vision-detection",
        name="gpr-0-a1",
        defaults={
            "request_key": "0",
            "attempt": 1,
            "kind": "job",
            "team_slug": "vision",
            "project_slug": "detection",
            "created_at": now,
            "starts_at": now,
            "ends_at": now + timedelta(days=365),
        },
    )
