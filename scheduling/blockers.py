"""The blocker of a waiting request: what most keeps it from starting (docs/blockers.md).

`GpuRequest.blocker` holds `{"code", "message", "detail"}`, or `{}` when nothing blocks. It is
written where the portal learns why a request waits, never recomputed on a page:
1. at submission, when the request must wait for a team lead (`approval_blocker`): `budget`
   when a policy of a higher layer (accounting's over-budget policy, through the submission
   hook) asks for the approval, else `approval`;
2. by the scheduling cycle, after it stores the engine's waiting reasons (`record_blockers`):
   the engine's classification (`scheduling.engine.blockers.explain_waits`) of each request it
   left queued, and `{}` for those it admitted;
3. by workload sync, while the cluster has not started admitted work (`cluster_blocker`), and
   `{}` once it runs.

Why stored and not computed when a page is read: the engine's classification needs the whole
fleet's snapshot and the plan, which only the cycle has; storing it costs one batched UPDATE of
the rows whose blocker changed (a quiet cycle writes nothing), while computing it per page
would rebuild the snapshot on every read. A blocker left from an earlier status is never shown:
`shown_blocker` keeps only the codes that belong to the request's current status.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scheduling.choices import RequestStatus
from scheduling.engine import Plan, Snapshot
from scheduling.engine.blockers import ENGINE_CODES, Blocker, explain_waits
from scheduling.models import GpuRequest

BUDGET = "budget"
# The codes that belong to each status; any other stored code is left over and not shown.
CODES_OF_STATUS: dict[str, frozenset[str]] = {
    RequestStatus.PENDING_APPROVAL: frozenset({"approval", BUDGET}),
    RequestStatus.QUEUED: frozenset(ENGINE_CODES),
    RequestStatus.ADMITTED: frozenset({"cluster"}),
    RequestStatus.LAUNCHING: frozenset({"cluster"}),
}


def approval_blocker(*, lead_reasons: Sequence[str], policy_codes: Sequence[str]) -> dict[str, Any]:
    """Why a new request waits for a team lead: `budget` when a budget policy asks for the
    approval (`policy_codes` are the blocker codes of the submission hook's answers)."""
    reasons = [reason for reason in lead_reasons if reason]
    if BUDGET in policy_codes:
        blocker = Blocker(
            "budget",
            "The team's budget is used up this month, so a team lead must approve it.",
            {"reasons": reasons},
        )
    else:
        blocker = Blocker(
            "approval",
            f"Waiting for a team lead to approve it: {'; '.join(reasons) or 'the rule says so'}.",
            {"reasons": reasons},
        )
    return blocker.as_dict()


def cluster_blocker(*, headline: str, reason: str) -> dict[str, Any]:
    """Why the cluster has not started admitted work: its headline, its own words in detail."""
    message = headline or "The cluster has not started it yet."
    return Blocker("cluster", message, {"reason": reason}).as_dict()


def shown_blocker(status: str, blocker: dict[str, Any] | None) -> dict[str, Any]:
    """The stored blocker if it belongs to `status`, else `{}` (nothing blocks it now)."""
    if not blocker or blocker.get("code") not in CODES_OF_STATUS.get(status, frozenset()):
        return {}
    return blocker


def record_blockers(snapshot: Snapshot, plan: Plan) -> int:
    """Step 3 of a cycle, beside the waiting reasons: store each queued request's blocker and
    clear those of the requests just admitted, in batched UPDATEs of the rows that changed.

    Returns the number of rows written.
    """
    found = {int(pk): blocker.as_dict() for pk, blocker in explain_waits(snapshot, plan).items()}
    admitted = [int(admission.request_id) for admission in plan.admissions]
    stored = dict(
        GpuRequest.objects.filter(pk__in=[*found, *admitted]).values_list("pk", "blocker")
    )
    changed = [
        GpuRequest(pk=pk, blocker=blocker)
        for pk, blocker in found.items()
        if pk in stored and stored[pk] != blocker
    ]
    changed += [GpuRequest(pk=pk, blocker={}) for pk in admitted if stored.get(pk)]
    GpuRequest.objects.bulk_update(changed, ["blocker"], batch_size=500)
    return len(changed)
