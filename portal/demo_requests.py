"""The demo's requests as drawn: what each team asks for, and what became of each request.

`draw_request` draws one request of a team and its life — approved at once or by the lead,
rejected, expired, cancelled, run to success or failure, preempted and requeued, reclaimed for
idleness or stopped at the timeout — as a `Drawn` with its runs and the audit events to write.
`waiting_for_leads` fills each lead's inbox, and `draw_benchmarks` gives the sharing report its
evidence. Nothing here writes to the database: `portal.demo_history` does.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from scheduling.choices import FlavorKind, Priority, RequestStatus, WorkloadKind
from scheduling.models import Flavor, GpuRequest
from tenants.models import Project, Team
from tenants.scope import Actor

SEED = 20260101
HOUR = 3600

IMAGES = {
    WorkloadKind.JOB: "pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime",
    WorkloadKind.NOTEBOOK: "jupyter/pytorch-notebook:2024-10-07",
    WorkloadKind.SERVICE: "vllm/vllm-openai:v0.6.3",
}
NAMES = {
    "vision": {
        WorkloadKind.JOB: [
            "detr-finetune",
            "resnet-sweep",
            "sam-distill",
            "yolo-train",
            "vit-eval",
        ],
        WorkloadKind.NOTEBOOK: ["explore-coco", "label-audit", "augment-tests", "mask-debug"],
        WorkloadKind.SERVICE: ["detector-api", "segment-api"],
    },
    "speech": {
        WorkloadKind.JOB: ["wav2vec-train", "whisper-finetune", "vocoder-train", "asr-eval"],
        WorkloadKind.NOTEBOOK: ["explore-librispeech", "prosody-notebook", "wer-analysis"],
        WorkloadKind.SERVICE: ["asr-serving", "tts-serving"],
    },
}
# team: [(flavor slug, weight)] — what each team mostly asks for.
FLAVOR_MIX = {
    "vision": [
        ("a100-80g", 3),
        ("l4-12g", 3),
        ("l4-6g", 2),
        ("h100-1g10gb", 2),
        ("h100-3g40gb", 1),
    ],
    "speech": [("l4-12g", 3), ("l4-6g", 2), ("h100-1g10gb", 3), ("h100-3g40gb", 2)],
}
# team: (developer, lead)
PEOPLE = {"vision": ("alice", "bob"), "speech": ("carol", "dan")}
# The sharing report's evidence: a nightly benchmark per sharing pool, once alone on its card
# and once beside a neighbour on another card, so the same work is timed both ways.
# (team, owner, flavor, name, image, minutes alone, slowdown drawn when shared)
BENCHMARKS = (
    (
        "vision",
        "bob",
        "l4-6g",
        "resnet50-bench",
        "ghcr.io/gpu-portal/bench-resnet50:1.2",
        40,
        (1.04, 1.14),
    ),
    (
        "speech",
        "dan",
        "h100-1g10gb",
        "whisper-bench",
        "ghcr.io/gpu-portal/bench-whisper:0.9",
        25,
        (1.01, 1.05),
    ),
)
NEIGHBOUR_IMAGE = "ghcr.io/gpu-portal/data-prep:2.0"
BENCHMARK_DAYS = 28
REJECTIONS = [
    "Please use the vGPU pool for this; whole cards are booked for the release training.",
    "Above our guarantee this week; try again after Friday's run.",
    "Too many GPUs for an experiment; start with one and show the curve.",
]


@dataclass
class Run:
    """One attempt that ran: [started_at, ended_at) with how it ended."""

    admitted_at: datetime
    started_at: datetime
    ended_at: datetime
    end_reason: str
    is_borrowed: bool = False
    idle_from: datetime | None = None  # activity dropped to ~0 from here (idle reclaim)


@dataclass
class Drawn:
    """A request as drawn, with the moments of its life and its audit events to write."""

    request: GpuRequest
    created_at: datetime
    updated_at: datetime
    runs: list[Run] = field(default_factory=list)
    events: list[tuple[datetime, dict[str, Any]]] = field(default_factory=list)
    card: tuple[str, int] | None = None  # a benchmark's card; the rest are drawn


def draw_request(
    draw: random.Random,
    *,
    team: Team,
    owner: Any,
    lead: Any,
    project: Project,
    flavors: dict[str, Flavor],
    submitted: datetime,
    now: datetime,
) -> Drawn | None:
    """One request of the team and what became of it; None if it would still be running."""
    slugs, weights = zip(*FLAVOR_MIX[team.slug], strict=True)
    flavor = flavors[draw.choices(slugs, weights)[0]]
    tier = flavor.pool.tier
    if flavor.kind == FlavorKind.WHOLE:
        kind = WorkloadKind.JOB
        gpu_count = draw.choice([1, 2, 2, 4, 4, 8])
    else:
        kind = draw.choices(
            [WorkloadKind.JOB, WorkloadKind.NOTEBOOK, WorkloadKind.SERVICE], [5, 3, 2]
        )[0]
        gpu_count = draw.choice([1, 1, 1, 2]) if kind != WorkloadKind.SERVICE else 1
    if kind == WorkloadKind.JOB:
        max_runtime = min(tier.max_runtime_seconds, draw.choice([4, 8, 8, 24, 48]) * HOUR)
    elif kind == WorkloadKind.NOTEBOOK:
        max_runtime = min(tier.max_runtime_seconds, 8 * HOUR)
    else:
        max_runtime = min(tier.max_runtime_seconds, draw.choice([8, 24, 72]) * HOUR)
    priority = draw.choices([Priority.LOW, Priority.NORMAL, Priority.HIGH], [2, 12, 1])[0]
    memory_mib = cores = None
    if flavor.kind == FlavorKind.VGPU:
        memory_mib, cores = flavor.gpu_memory_mib, flavor.gpu_cores_percent
    request = GpuRequest(
        project=project,
        team=team,
        owner=owner,
        flavor=flavor,
        # host resources as submit resolves them (the flavor's defaults): what CPU/memory cost
        cpu_millicores=flavor.default_cpu_millicores,
        memory_mib=flavor.default_memory_mib,
        name=draw.choice(NAMES[team.slug][kind]),
        gpu_count=gpu_count,
        gpu_memory_mib=memory_mib,
        gpu_cores_percent=cores,
        kind=kind,
        image=IMAGES[kind],
        # Each run has its own id, as real training runs do: two of them are not the same work, so
        # the sharing report compares only the nightly benchmarks, which repeat one command.
        command=["python", "train.py", "--run-id", f"{submitted:%Y%m%d-%H%M%S}"]
        if kind == WorkloadKind.JOB
        else [],
        max_runtime_seconds=max_runtime,
        priority=priority,
        is_preemptible=draw.random() < 0.15,
        gpu_equivalent=flavor.gpu_equivalent * gpu_count,
        approval_expires_at=submitted + timedelta(hours=72),
    )
    one = _submitted(request, submitted, owner)
    # Approval: whole training cards, high priority and some work above the guarantee wait
    # for the lead; the rest is approved as it is recorded.
    reasons = []
    if flavor.kind == FlavorKind.WHOLE:
        reasons.append("whole cards in this tier")
    if priority == Priority.HIGH:
        reasons.append("high priority")
    if draw.random() < 0.12:
        reasons.append("above the guaranteed quota")
    at = submitted
    if reasons:
        request.needs_lead_approval_because = "; ".join(reasons)
        decided = at + timedelta(seconds=draw.uniform(600, 6 * HOUR))
        outcome = draw.choices(["approved", "rejected", "expired"], [84, 13, 3])[0]
        if decided >= now:
            return None  # still waiting: the inboxes get their own requests below
        if outcome == "rejected":
            comment = draw.choice(REJECTIONS)
            request.decision_comment = comment
            request.approved_by = lead
            return _finish(one, RequestStatus.REJECTED, decided, f"Rejected: {comment}", lead)
        if outcome == "expired":
            expired = at + timedelta(hours=72)
            if expired >= now:
                return None
            return _finish(one, RequestStatus.EXPIRED, expired, "Not approved in time.", None)
        request.approved_by = lead
        request.approved_at = decided
        _move(one, decided, RequestStatus.APPROVED, "Approved by the team lead.", lead)
        at = decided
    else:
        request.approved_at = at
        _move(one, at, RequestStatus.APPROVED, "Approved automatically: within guaranteed quota.")
    request.queued_at = at
    _move(one, at, RequestStatus.QUEUED, "Waiting for the next scheduling cycle.")
    if draw.random() < 0.04:  # the owner gave up waiting
        cancelled = at + timedelta(seconds=draw.uniform(300, 2 * HOUR))
        if cancelled >= now:
            return None
        return _finish(one, RequestStatus.CANCELLED, cancelled, "Cancelled by its owner.", owner)
    # Runs: preempted once and requeued, or straight through.
    wait = draw.uniform(20, 900) * (6 if flavor.kind == FlavorKind.WHOLE else 1)
    admitted = at + timedelta(seconds=wait)
    if draw.random() < 0.08 and kind != WorkloadKind.NOTEBOOK:
        began = admitted + timedelta(seconds=draw.uniform(5, 40))
        preempted = began + timedelta(seconds=draw.uniform(0.3, 3) * HOUR)
        _run(one, admitted, began)
        one.runs.append(Run(admitted, began, preempted, "preempted", is_borrowed=True))
        reason = "Preempted: its team ran on borrowed quota that another team reclaimed."
        _move(one, preempted, RequestStatus.PREEMPTED, reason)
        _move(one, preempted, RequestStatus.QUEUED, "Requeued after preemption.")
        admitted = preempted + timedelta(seconds=draw.uniform(60, 1800))
    began = admitted + timedelta(seconds=draw.uniform(5, 40))
    _run(one, admitted, began)
    request.started_at = began
    # How it ended.
    if kind == WorkloadKind.JOB:
        ending = draw.choices(["succeeded", "failed", "timeout", "cancelled"], [74, 9, 8, 9])[0]
    elif kind == WorkloadKind.NOTEBOOK:
        ending = draw.choices(["cancelled", "idle", "timeout"], [50, 38, 12])[0]
    else:
        ending = draw.choices(["cancelled", "idle", "timeout"], [55, 20, 25])[0]
    if ending == "timeout":
        ended = began + timedelta(seconds=max_runtime)
    else:
        ended = began + timedelta(seconds=draw.uniform(0.3, 0.9) * max_runtime)
        ended = min(ended, began + timedelta(hours=draw.uniform(2, 14)))
    if ended >= now - timedelta(minutes=10):
        return None  # would still be running: the live demo's own work runs now
    run = Run(admitted, began, ended, "")
    one.runs.append(run)
    if ending == "succeeded":
        return _finish(one, RequestStatus.SUCCEEDED, ended, "The workload completed.", None, run)
    if ending == "failed":
        reason = draw.choice(["OOMKilled", "Error"])
        message = f"The workload failed: {reason}."
        return _finish(one, RequestStatus.FAILED, ended, message, None, run)
    if ending == "cancelled":
        return _finish(one, RequestStatus.CANCELLED, ended, "Cancelled by its owner.", owner, run)
    if ending == "timeout":
        warned = ended - timedelta(minutes=15)
        message = "The max runtime ends soon; ask your lead for an extension if needed."
        _event(one, warned, "reclaim.timeout_warning", message)
        reason = f"Stopped: it reached its max runtime of {max_runtime / HOUR:g} h."
        evidence = {"started_at": began.isoformat(), "max_runtime_seconds": max_runtime}
        return _reclaim(one, run, ended, reason, "timeout", evidence)
    window = 60 if kind == WorkloadKind.NOTEBOOK else 30
    run.idle_from = ended - timedelta(minutes=window)
    warned = ended - timedelta(minutes=10)
    evidence = {"threshold_percent": 5, "window_seconds": window * 60, "peak_percent": 2.0}
    _event(one, warned, "reclaim.idle_warning", "Idle; reclaimed unless it gets busy.", evidence)
    reason = f"Reclaimed: GPU activity stayed under 5% for {window} minutes (peak 2.0%)."
    return _reclaim(one, run, ended, reason, "idle", evidence)


def _submitted(request: GpuRequest, at: datetime, owner: Any) -> Drawn:
    one = Drawn(request=request, created_at=at, updated_at=at)
    one.events.append((at, {"actor": owner, "action": "request.submitted"}))
    return one


def _move(one: Drawn, at: datetime, to: str, reason: str, actor: Actor | None = None) -> None:
    before = one.request.status
    one.request.status, one.request.status_reason = to, reason
    one.updated_at = at
    one.events.append(
        (
            at,
            {
                "actor": actor,
                "action": f"request.{to}",
                "message": reason,
                "data": {"from": before, "to": to},
            },
        )
    )


def _event(
    one: Drawn, at: datetime, action: str, message: str, data: dict[str, Any] | None = None
) -> None:
    one.events.append((at, {"actor": None, "action": action, "message": message, "data": data}))


def _run(one: Drawn, admitted: datetime, began: datetime) -> None:
    one.request.attempt += 1
    _move(one, admitted, RequestStatus.ADMITTED, "Admitted: capacity reserved, launching.")
    _move(one, admitted, RequestStatus.LAUNCHING, "Launching on the cluster.")
    _move(one, began, RequestStatus.RUNNING, "Running.")


def _finish(
    one: Drawn, status: str, at: datetime, reason: str, actor: Actor | None, run: Run | None = None
) -> Drawn:
    if run is not None:
        run.end_reason = status
    one.request.finished_at = at
    _move(one, at, status, reason, actor)
    return one


def _reclaim(
    one: Drawn, run: Run, at: datetime, reason: str, code: str, evidence: dict[str, Any]
) -> Drawn:
    _finish(one, RequestStatus.RECLAIMED, at, reason, None, run)
    run.end_reason = f"reclaimed: {code}"
    _event(one, at, f"reclaim.{code}", reason, evidence)
    return one


def waiting_for_leads(
    users: dict[str, Any],
    teams: dict[str, Team],
    projects: dict[str, list[Project]],
    flavors: dict[str, Flavor],
    now: datetime,
) -> list[Drawn]:
    """One request in each lead's inbox at first sign-in, submitted within the last hour."""
    asks = [
        ("vision", "alice", "a100-80g", 2, Priority.NORMAL, "whole cards in this tier", 35),
        ("speech", "carol", "h100-3g40gb", 1, Priority.HIGH, "high priority", 20),
    ]
    waiting = []
    for slug, username, flavor_slug, count, priority, because, minutes_ago in asks:
        flavor = flavors[flavor_slug]
        submitted = now - timedelta(minutes=minutes_ago)
        request = GpuRequest(
            project=projects[slug][0],
            team=teams[slug],
            owner=users[username],
            flavor=flavor,
            # host resources as submit resolves them (the flavor's defaults): what CPU/memory cost
            cpu_millicores=flavor.default_cpu_millicores,
            memory_mib=flavor.default_memory_mib,
            name=NAMES[slug][WorkloadKind.JOB][0],
            gpu_count=count,
            kind=WorkloadKind.JOB,
            image=IMAGES[WorkloadKind.JOB],
            command=["python", "train.py"],
            max_runtime_seconds=min(flavor.pool.tier.max_runtime_seconds, 24 * HOUR),
            priority=priority,
            gpu_equivalent=flavor.gpu_equivalent * count,
            needs_lead_approval_because=because,
            status_reason=f"Waiting for a team lead: {because}.",
            approval_expires_at=submitted + timedelta(hours=72),
        )
        waiting.append(_submitted(request, submitted, users[username]))
    return waiting


def _benchmark_run(
    *,
    team: Team,
    owner: Any,
    project: Project,
    flavor: Flavor,
    name: str,
    image: str,
    card: tuple[str, int],
    started: datetime,
    seconds: float,
) -> Drawn:
    """One finished benchmark job on a given card: approved, queued, run, succeeded."""
    submitted = started - timedelta(seconds=30)
    request = GpuRequest(
        project=project,
        team=team,
        owner=owner,
        flavor=flavor,
        # host resources as submit resolves them (the flavor's defaults): what CPU/memory cost
        cpu_millicores=flavor.default_cpu_millicores,
        memory_mib=flavor.default_memory_mib,
        name=name,
        gpu_count=1,
        gpu_memory_mib=flavor.gpu_memory_mib if flavor.kind == FlavorKind.VGPU else None,
        gpu_cores_percent=flavor.gpu_cores_percent if flavor.kind == FlavorKind.VGPU else None,
        kind=WorkloadKind.JOB,
        image=image,
        command=["python", "bench.py"],
        max_runtime_seconds=min(flavor.pool.tier.max_runtime_seconds, 2 * HOUR),
        gpu_equivalent=flavor.gpu_equivalent,
        approved_at=submitted,
        queued_at=submitted,
        approval_expires_at=submitted + timedelta(hours=72),
    )
    one = _submitted(request, submitted, owner)
    one.card = card
    _move(
        one, submitted, RequestStatus.APPROVED, "Approved automatically: within guaranteed quota."
    )
    _move(one, submitted, RequestStatus.QUEUED, "Waiting for the next scheduling cycle.")
    admitted = started - timedelta(seconds=20)
    _run(one, admitted, started)
    request.started_at = started
    ended = started + timedelta(seconds=seconds)
    run = Run(admitted, started, ended, "")
    one.runs.append(run)
    return _finish(one, RequestStatus.SUCCEEDED, ended, "The workload completed.", None, run)


def draw_benchmarks(
    users: dict[str, Any],
    teams: dict[str, Team],
    projects: dict[str, list[Project]],
    flavors: dict[str, Flavor],
    nodes: dict[int, list[str]],
    days: int,
    now: datetime,
) -> list[Drawn]:
    """Nightly benchmarks on the sharing pools (`BENCHMARKS`): each night one run alone on the
    first card of the pool's first node, one on the second card beside a data-prep neighbour.
    Their own draw leaves the rest of the history as it was."""
    draw = random.Random(f"{SEED}/benchmarks/{now:%Y-%m-%d}")
    out: list[Drawn] = []
    for slug, username, flavor_slug, name, image, minutes, slowdown in BENCHMARKS:
        flavor = flavors[flavor_slug]
        pool_nodes = nodes[flavor.pool_id]
        if slug not in teams or not pool_nodes:
            continue
        common = {
            "team": teams[slug],
            "owner": users[username],
            "project": projects[slug][0],
            "flavor": flavor,
        }
        alone, shared = (pool_nodes[0], 0), (pool_nodes[0], 1)
        base = minutes * 60
        for back in range(min(days, BENCHMARK_DAYS), 0, -1):
            night = (now - timedelta(days=back)).replace(hour=1, minute=0, second=0, microsecond=0)
            neighbour_seconds = base * 1.3 + 1200
            if night + timedelta(hours=2, seconds=neighbour_seconds) >= now - timedelta(minutes=10):
                continue
            out.append(
                _benchmark_run(
                    **common,
                    name=name,
                    image=image,
                    card=alone,
                    started=night + timedelta(seconds=draw.uniform(0, 600)),
                    seconds=base * draw.uniform(0.98, 1.02),
                )
            )
            out.append(
                _benchmark_run(
                    **common,
                    name="data-prep",
                    image=NEIGHBOUR_IMAGE,
                    card=shared,
                    started=night + timedelta(hours=1, minutes=50),
                    seconds=neighbour_seconds,
                )
            )
            out.append(
                _benchmark_run(
                    **common,
                    name=name,
                    image=image,
                    card=shared,
                    started=night + timedelta(hours=2),
                    seconds=base * draw.uniform(*slowdown),
                )
            )
    return out
