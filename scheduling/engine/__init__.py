"""GPU Portal scheduling engine: pure planning over a frozen snapshot of the fleet.

No Django, no I/O, no clock, no randomness: `plan(snapshot, now=..., policy=...)` is a function
of its arguments.  See docs/engine.md for the design.
"""

from __future__ import annotations

from .planner import Scheduler, plan
from .types import (
    DEFAULT_FILTERS,
    DEFAULT_SCORES,
    MIG_PROFILES,
    Admission,
    Allocation,
    Decision,
    DeviceClaim,
    Flavor,
    GpuDevice,
    Member,
    MigProfile,
    Node,
    Plan,
    Policy,
    Pool,
    Preemption,
    Priority,
    Quota,
    Request,
    Reservation,
    Snapshot,
    Taint,
    Team,
    Waiting,
    mig_free_by_profile,
    vgpu_equivalent,
)

__all__ = [
    "DEFAULT_FILTERS",
    "DEFAULT_SCORES",
    "MIG_PROFILES",
    "Admission",
    "Allocation",
    "Decision",
    "DeviceClaim",
    "Flavor",
    "GpuDevice",
    "MigProfile",
    "Node",
    "Plan",
    "Policy",
    "Pool",
    "Preemption",
    "Priority",
    "Quota",
    "Request",
    "Reservation",
    "Scheduler",
    "Member",
    "Snapshot",
    "Taint",
    "Team",
    "Waiting",
    "mig_free_by_profile",
    "plan",
    "vgpu_equivalent",
]
