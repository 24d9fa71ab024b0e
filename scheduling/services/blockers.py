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

from django.db import connection

from scheduling.choices import RequestStatus
from scheduling.engine.blockers import ENGINE_CODES, Blocker, BlockerCode, explain_waits
from scheduling.engine.types import Plan, Snapshot
from scheduling.models import GpuRequest
from scheduling.services.row_updates import update_shared_json

# Why a request waits from the moment it is queued until a cycle has looked at it: a queued
# request always shows a reason, and an earlier cycle's reason is not left over.
NEXT_CYCLE_REASON = "Waiting for the scheduler's next cycle (every few seconds)."

BUDGET = "budget"
RETRY_BACKOFF: BlockerCode = "retry_backoff"
# The codes that belong to each status; any other stored code is left over and not shown.
CODES_OF_STATUS: dict[str, frozenset[str]] = {
    RequestStatus.PENDING_APPROVAL: frozenset({"approval", BUDGET}),
    # `retry_backoff`: crashed work waiting out its backoff (`retry_blocker`), out of the cycle.
    RequestStatus.QUEUED: frozenset({*ENGINE_CODES, RETRY_BACKOFF}),
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


def retry_blocker(*, message: str, retry_at: str, failure: str) -> dict[str, Any]:
    """Why crashed work back in the queue is not scheduled yet: its retry backoff."""
    return Blocker(RETRY_BACKOFF, message, {"retry_at": retry_at, "reason": failure}).as_dict()


def shown_blocker(status: str, blocker: dict[str, Any] | None) -> dict[str, Any]:
    """The stored blocker if it belongs to `status`, else `{}` (nothing blocks it now)."""
    if not blocker or blocker.get("code") not in CODES_OF_STATUS.get(status, frozenset()):
        return {}
    return blocker


def why_it_waits(gpu_request: GpuRequest) -> str:
    """The one sentence that says why `gpu_request` has not started, or "" when it does not
    wait: its blocker's message when it has one for its status, else the engine's (queued) or
    the lifecycle's (waiting for a lead, for the cluster) last word. Every page that says why a
    request waits (its page's headline and blocker, the request list, the home page) shows this
    sentence and no other, so two lines never give two accounts."""
    blocker = shown_blocker(gpu_request.status, gpu_request.blocker)
    if blocker.get("message"):
        return str(blocker["message"])
    if gpu_request.status == RequestStatus.QUEUED:
        return gpu_request.waiting_reason or NEXT_CYCLE_REASON
    if gpu_request.status == RequestStatus.PENDING_APPROVAL:
        return gpu_request.status_reason or "Waiting for a team lead to approve it."
    if gpu_request.status in (RequestStatus.ADMITTED, RequestStatus.LAUNCHING):
        return gpu_request.status_reason if gpu_request.waiting_reason else ""
    return ""


def record_blockers(snapshot: Snapshot, plan: Plan) -> int:
    """Step 3 of a cycle, beside the waiting reasons: store each queued request's blocker and
    clear those of the requests just admitted, writing only the rows whose blocker changed.

    Returns the number of rows written.
    """
    # Requests of one shape share one Blocker, and so one stored value.
    stored_form: dict[int, dict[str, Any]] = {}
    found: dict[int, dict[str, Any]] = {}
    for pk, blocker in explain_waits(snapshot, plan).items():
        if id(blocker) not in stored_form:
            stored_form[id(blocker)] = blocker.as_dict()
        found[int(pk)] = stored_form[id(blocker)]
    cleared: dict[str, Any] = {}
    rows = [*found.items(), *((int(a.request_id), cleared) for a in plan.admissions)]
    if connection.vendor == "postgresql":
        return _write_changed(rows)
    stored = dict(
        GpuRequest.objects.filter(pk__in=[pk for pk, _ in rows]).values_list("pk", "blocker")
    )
    changed = [
        GpuRequest(pk=pk, blocker=blocker)
        for pk, blocker in rows
        if pk in stored and stored[pk] != blocker
    ]
    GpuRequest.objects.bulk_update(changed, ["blocker"], batch_size=500)
    return len(changed)


def _write_changed(rows: list[tuple[int, dict[str, Any]]]) -> int:
    """PostgreSQL: one UPDATE that compares in the database, so unchanged rows are neither
    read back nor written, and sends each distinct blocker once
    (scheduling/services/row_updates.py)."""
    return update_shared_json(GpuRequest, "blocker", rows, only_if_different=True)
