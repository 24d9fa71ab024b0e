"""What the demo's simulated cluster holds before anyone signs in."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from runtime.models import SimulatedWorkload
from tenants.demo import DemoSeeding


def seed_demo_zombie(*, seeding: DemoSeeding) -> None:
    """A workload left behind in the simulated cluster with no request: the first reclaim pass
    finds and removes it, so the demo shows zombie cleanup. Seeded once (`tenants.demo`)."""
    now = timezone.now()
    seeding.get_or_create(
        "simulated-workload:gpu-vision-detection/gpr-0-a1",
        SimulatedWorkload,
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
