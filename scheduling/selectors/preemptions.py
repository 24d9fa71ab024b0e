"""What the owner of preempted work is shown of who preempted it.

The request it made room for may be another team's: its owner sees that request's number and
its team's name, and the engine's reason, never its name, owner, project or image (the engine's
reason names no more than the team either). The page and the API both read it from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from scheduling.models import GpuRequest

# The columns `last_preemption` reads, for a queryset's `only()` with
# `select_related("preempted_by__team")`.
PREEMPTION_COLUMNS = (
    "preempted_by__id",
    "preempted_by__team__name",
    "preemption_reason",
    "preempted_at",
    "preemption_deadline_at",
)


@dataclass(frozen=True, slots=True)
class PreemptedBy:
    """The request a preemption made room for, as far as the victim's owner may know it."""

    id: int
    team: str


@dataclass(frozen=True, slots=True)
class LastPreemption:
    """A request's last preemption: by what, why, when, and the deadline its pods were given."""

    preempted_by: PreemptedBy | None
    reason: str
    at: datetime
    deadline_at: datetime | None


def last_preemption(gpu_request: GpuRequest) -> LastPreemption | None:
    """The request's last preemption; None when it was never preempted. A preempting request
    deleted since is None in `preempted_by` (the reason and times stay)."""
    if gpu_request.preempted_at is None:
        return None
    by = gpu_request.preempted_by
    return LastPreemption(
        preempted_by=PreemptedBy(id=by.pk, team=by.team.name) if by is not None else None,
        reason=gpu_request.preemption_reason,
        at=gpu_request.preempted_at,
        deadline_at=gpu_request.preemption_deadline_at,
    )
