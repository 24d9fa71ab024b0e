"""The demo's past: `DEMO_HISTORY_DAYS` of requests, runs, usage, budgets and statements.

A visitor's first sign-in should find every dashboard and chart full, as in a portal that has
been in use for months. This module writes that past in bulk, from a seeded random draw, so the
same day seeds the same history:

1. Draw each team's requests day by day: every kind (job, notebook, service), every sharing mode
   (whole card, vGPU, MIG), approved at once or by the lead, rejected, expired, cancelled, run to
   success or failure, preempted and requeued, reclaimed for idleness or stopped at the timeout.
2. Insert the requests and their allocations in bulk (`bulk_create`, then the timestamps that
   `auto_now_add` set to the present are moved back with `bulk_update`), and their audit
   events with the moments they happened (`insert_audit_events`: the trail takes no UPDATE).
3. Add the usage of every run through the accounting's own bulk ingest (`ingest_usage`, rows
   from `portal.demo_ledger`), and mark each allocation fully metered, so the live meter never
   counts it again.
4. Keep utilisation samples for the runs of the last `SAMPLE_RETENTION_SECONDS` (what the
   efficiency charts read), set budgets with the alerts they fired, and close every month that
   is over, as finance would have.

Idempotent: the history is written once, marked by a `demo.history_seeded` audit event.
Gangs are not drawn: the demo quotas (at most 8 whole cards) never span two nodes.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from accounting.models import AllocationMeter
from accounting.services import ingest_usage
from portal.demo_ledger import close_months, insert_audit_events, usage_rows, write_budgets
from scheduling.choices import FlavorKind, Priority, RequestStatus, WorkloadKind
from scheduling.models import (
    Allocation,
    Flavor,
    GpuDevice,
    GpuRequest,
    Node,
    NodePool,
    UtilisationSample,
)
from tenants.choices import NotificationKind
from tenants.models import AuditEvent, Notification, Project, Team

HISTORY_MARKER = "demo.history_seeded"
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
PILOT_POOL, PILOT_DAYS_LEFT = "l4-vgpu", 30
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


def history_seeded() -> bool:
    return AuditEvent.objects.filter(action=HISTORY_MARKER).exists()


@transaction.atomic
def seed_demo_history(*, days: int, now: datetime | None = None) -> int:
    """Write `days` days of demo history ending at `now`, once; how many requests it drew."""
    if days <= 0 or history_seeded():
        return 0
    now = now or timezone.now()
    draw = random.Random(f"{SEED}/{days}/{now:%Y-%m-%d}")
    users = {user.username: user for user in get_user_model().objects.all()}
    teams = {team.slug: team for team in Team.objects.filter(slug__in=PEOPLE)}
    flavors = {flavor.slug: flavor for flavor in Flavor.objects.select_related("pool__tier")}
    projects: dict[str, list[Project]] = defaultdict(list)
    for project in Project.objects.filter(team__slug__in=PEOPLE).order_by("slug"):
        projects[project.team.slug].append(project)
    nodes: dict[int, list[str]] = defaultdict(list)
    for pool_id, name in Node.objects.order_by("name").values_list("pool_id", "name"):
        nodes[pool_id].append(name)
    # 1. Draw.
    drawn: list[Drawn] = []
    start = now - timedelta(days=days)
    for day in range(days):
        for slug, team in teams.items():
            developer, lead = (users[name] for name in PEOPLE[slug])
            for _ in range(draw.randint(3, 7)):
                submitted = start + timedelta(days=day, seconds=draw.uniform(7 * HOUR, 19 * HOUR))
                owner = developer if draw.random() < 0.75 else lead
                one = _draw_request(
                    draw,
                    team=team,
                    owner=owner,
                    lead=lead,
                    project=draw.choice(projects[slug]),
                    flavors=flavors,
                    submitted=submitted,
                    now=now,
                )
                if one is not None:
                    drawn.append(one)
    drawn += _waiting_for_leads(users, teams, projects, flavors, now)
    drawn += _benchmarks(users, teams, projects, flavors, nodes, days, now)
    drawn.sort(key=lambda d: d.created_at)
    # 2. Requests, allocations and audit events.
    requests = GpuRequest.objects.bulk_create([d.request for d in drawn], batch_size=500)
    for one, request in zip(drawn, requests, strict=True):
        request.created_at, request.updated_at = one.created_at, one.updated_at
    GpuRequest.objects.bulk_update(requests, ["created_at", "updated_at"], batch_size=500)
    allocations = _write_allocations(drawn, nodes, draw, _cards_of_nodes())
    _write_events(drawn)
    _write_notices(drawn, users)
    # 3. Usage, through the ledger's bulk ingest; the meter leaves these allocations alone.
    ingest_usage(usage_rows(allocations))
    AllocationMeter.objects.bulk_create(
        [
            AllocationMeter(allocation=a, metered_until=a.ended_at, is_final=True)
            for a in allocations
            if a.ended_at is not None
        ],
        batch_size=500,
    )
    # 4. Samples, budgets with their alerts, closed statements.
    _write_samples(allocations, drawn, now, draw)
    write_budgets(teams, users, projects, start, now)
    _mark_pilot(teams, now)
    close_months(teams, users["fiona"], start, now)
    AuditEvent.objects.create(
        action=HISTORY_MARKER,
        target_type="Demo",
        message=f"{days} days of demo history: {len(drawn)} requests.",
        data={"days": days, "requests": len(drawn)},
    )
    return len(drawn)


def _draw_request(
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
        name=draw.choice(NAMES[team.slug][kind]),
        gpu_count=gpu_count,
        gpu_memory_mib=memory_mib,
        gpu_cores_percent=cores,
        kind=kind,
        image=IMAGES[kind],
        command=["python", "train.py"] if kind == WorkloadKind.JOB else [],
        max_runtime_seconds=max_runtime,
        priority=priority,
        is_preemptible=draw.random() < 0.15,
        gpu_equivalent=flavor.gpu_equivalent * gpu_count,
        approval_expires_at=submitted + timedelta(hours=72),
    )
    one = Drawn(request=request, created_at=submitted, updated_at=submitted)
    one.events.append((submitted, {"actor": owner, "action": "request.submitted"}))
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


def _move(one: Drawn, at: datetime, to: str, reason: str, actor: Any = None) -> None:
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
    one: Drawn, status: str, at: datetime, reason: str, actor: Any, run: Run | None = None
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


def _waiting_for_leads(
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
        one = Drawn(request=request, created_at=submitted, updated_at=submitted)
        one.events.append(
            (
                submitted,
                {"actor": users[username], "action": "request.submitted", "data": {}},
            )
        )
        waiting.append(one)
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
    one = Drawn(request=request, created_at=submitted, updated_at=submitted, card=card)
    one.events.append((submitted, {"actor": owner, "action": "request.submitted"}))
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


def _benchmarks(
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


def _mark_pilot(teams: dict[str, Team], now: datetime) -> None:
    """The vGPU pool is the demo's sharing pilot, for both teams, for another 30 days."""
    pool = NodePool.objects.filter(slug=PILOT_POOL).first()
    if pool is None:
        return
    pool.is_pilot = True
    pool.pilot_until = (now + timedelta(days=PILOT_DAYS_LEFT)).date()
    pool.save(update_fields=["is_pilot", "pilot_until"])
    pool.pilot_teams.set(teams.values())


def _write_notices(drawn: list[Drawn], users: dict[str, Any]) -> None:
    """The inbox at first sign-in: each lead is asked for the approvals waiting on them, and each
    developer hears how their last decided request went (as `notify()` tells them live)."""
    notices: list[tuple[datetime, Notification]] = []
    for slug, (developer, lead) in PEOPLE.items():
        for one in drawn:
            request = one.request
            if request.team.slug != slug:
                continue
            if request.status == RequestStatus.PENDING_APPROVAL:
                notices.append(
                    (
                        one.created_at,
                        Notification(
                            recipient=users[lead],
                            kind=NotificationKind.APPROVAL,
                            event_type="request.approval_requested",
                            subject=f"GPU request {request.pk} waits for your approval",
                            body=request.status_reason,
                            url=reverse("approvals-page"),
                        ),
                    )
                )
        decided = [
            one
            for one in drawn
            if one.request.owner == users[developer]
            and one.request.status in (RequestStatus.SUCCEEDED, RequestStatus.REJECTED)
        ]
        for one in decided[-3:]:
            request = one.request
            word = "was turned down" if request.status == RequestStatus.REJECTED else "finished"
            notices.append(
                (
                    one.updated_at,
                    Notification(
                        recipient=users[developer],
                        kind=NotificationKind.UPDATE,
                        event_type=f"request.{request.status}",
                        subject=f"GPU request {request.pk} ({request.name}) {word}",
                        body=request.decision_comment or request.status_reason,
                        url=reverse("gpu-request-page", args=[request.pk]),
                    ),
                )
            )
    written = Notification.objects.bulk_create([notice for _, notice in notices])
    for (at, _), notice in zip(notices, written, strict=True):
        notice.created_at = at
    Notification.objects.bulk_update(written, ["created_at"])


@dataclass(frozen=True, slots=True)
class DemoCard:
    index: int
    memory_mib: int
    mig_layout: dict[str, int]


# (node, index) -> [(start, end, whole, memory MiB, cores %, MIG profile)] of the claims so far
Booked = dict[tuple[str, int], list[tuple[datetime, datetime, bool, int, int, str]]]


def _cards_of_nodes() -> dict[str, list[DemoCard]]:
    cards: dict[str, list[DemoCard]] = defaultdict(list)
    for name, index, memory, layout in GpuDevice.objects.order_by(
        "node__name", "index"
    ).values_list("node__name", "index", "memory_mib", "mig_layout"):
        cards[name].append(DemoCard(index, memory, layout if isinstance(layout, dict) else {}))
    return cards


def _fits(
    booked: Booked, key: tuple[str, int], card: DemoCard, run: Run, claim: dict[str, Any]
) -> bool:
    """Whether the claim fits the card beside what is booked on it during the run."""
    during = [b for b in booked.get(key, []) if b[0] < run.ended_at and run.started_at < b[1]]
    if claim["whole"] or any(b[2] for b in during):
        return not during
    profile = claim["mig_profile"]
    if profile:
        same = sum(1 for b in during if b[5] == profile)
        return same < card.mig_layout.get(profile, 0)
    memory = sum(b[3] for b in during) + claim["memory_mib"]
    cores = sum(b[4] for b in during) + claim["cores_percent"]
    return memory <= card.memory_mib and cores <= 100


def _place(
    *,
    pool_nodes: list[str],
    drawn_node: str,
    offsets: list[int],
    claim: dict[str, Any],
    run: Run,
    cards: dict[str, list[DemoCard]],
    booked: Booked,
    kept: set[tuple[str, int]],
) -> tuple[str, list[int]]:
    """Cards for the run that are free enough while it runs, looked for from the drawn node and
    card on, shares packed onto cards already in use first (as the engine bin-packs); the drawn
    ones if none fit (the benchmarks' cards in `kept` are never taken)."""
    start = pool_nodes.index(drawn_node)

    def in_use(node: str, index: int) -> bool:
        return any(
            b[0] < run.ended_at and run.started_at < b[1] for b in booked.get((node, index), [])
        )

    candidates = []
    for node in pool_nodes[start:] + pool_nodes[:start]:
        devices = cards.get(node, [])
        if not devices:
            continue
        first = offsets[0] % len(devices)
        order = devices[first:] + devices[:first]
        free = [
            d.index
            for d in order
            if (node, d.index) not in kept and _fits(booked, (node, d.index), d, run, claim)
        ]
        if not claim["whole"]:
            free.sort(key=lambda index: not in_use(node, index))
        if len(free) >= len(offsets):
            candidates.append((node, free[: len(offsets)]))
    if candidates:
        if claim["whole"]:
            return candidates[0]
        return max(candidates, key=lambda c: sum(in_use(c[0], index) for index in c[1]))
    devices = cards.get(drawn_node, [])
    count = len(devices) or 8
    indexes = [(position + offset) % count for position, offset in enumerate(offsets)]
    return drawn_node, [
        (i + 2) % count if (drawn_node, i) in kept and count >= 4 else i for i in indexes
    ]


def _write_allocations(
    drawn: list[Drawn],
    nodes: dict[int, list[str]],
    draw: random.Random,
    cards: dict[str, list[DemoCard]],
) -> list[Allocation]:
    """The runs' allocations on cards that had room for them (whole cards are never shared);
    the benchmarks keep their own two cards."""
    allocations: list[Allocation] = []
    moments: list[datetime] = []
    booked: Booked = defaultdict(list)
    kept = {
        (one.card[0], one.card[1] + index)
        for one in drawn
        if one.card is not None
        for index in range(one.request.gpu_count)
    }
    for one in drawn:
        request = one.request
        pool_id = request.flavor.pool_id
        for attempt, run in enumerate(one.runs, start=1):
            claim: dict[str, Any] = {
                "whole": request.flavor.kind == FlavorKind.WHOLE,
                "memory_mib": request.gpu_memory_mib or request.flavor.gpu_memory_mib,
                "cores_percent": request.gpu_cores_percent or request.flavor.gpu_cores_percent,
                "mig_profile": request.flavor.mig_profile,
                "mig_start": None,
            }
            if one.card is not None:
                node, first_card = one.card
                indexes = [first_card + index for index in range(request.gpu_count)]
            elif nodes[pool_id]:
                node, indexes = _place(
                    pool_nodes=nodes[pool_id],
                    drawn_node=draw.choice(nodes[pool_id]),
                    offsets=[draw.randrange(8) for _ in range(request.gpu_count)],
                    claim=claim,
                    run=run,
                    cards=cards,
                    booked=booked,
                    kept=kept,
                )
            else:
                node, indexes = "", [draw.randrange(8) for _ in range(request.gpu_count)]
            claims = [{"node": node, "device_index": index, **claim} for index in indexes]
            for index in indexes:
                booked[(node, index)].append(
                    (
                        run.started_at,
                        run.ended_at,
                        claim["whole"],
                        claim["memory_mib"],
                        claim["cores_percent"],
                        claim["mig_profile"],
                    )
                )
            allocations.append(
                Allocation(
                    request=request,
                    attempt=attempt,
                    pool_id=pool_id,
                    claims=claims,
                    is_borrowed=run.is_borrowed,
                    is_preemptible=run.is_borrowed or request.is_preemptible,
                    workload_name=f"gpr-{request.pk}-a{attempt}",
                    node_name=node,
                    started_at=run.started_at,
                    ended_at=run.ended_at,
                    end_reason=run.end_reason,
                    exit_code=0 if run.end_reason == RequestStatus.SUCCEEDED else None,
                )
            )
            moments.append(run.admitted_at)
    Allocation.objects.bulk_create(allocations, batch_size=500)
    for allocation, admitted_at in zip(allocations, moments, strict=True):
        allocation.admitted_at = admitted_at
    Allocation.objects.bulk_update(allocations, ["admitted_at"], batch_size=500)
    return allocations


def _write_events(drawn: list[Drawn]) -> None:
    events: list[tuple[datetime, AuditEvent]] = []
    for one in drawn:
        request = one.request
        for at, spec in one.events:
            data = spec.get("data")
            if spec["action"] == "request.submitted":
                data = request.as_audit_data() | {"status": RequestStatus.PENDING_APPROVAL}
            event = AuditEvent(
                actor=spec["actor"],
                action=spec["action"],
                target_type="GpuRequest",
                target_id=str(request.pk),
                team_id=request.team_id,
                project_id=request.project_id,
                message=spec.get("message", ""),
                data=data or {},
            )
            events.append((at, event))
    insert_audit_events(events)


def _write_samples(
    allocations: list[Allocation], drawn: list[Drawn], now: datetime, draw: random.Random
) -> None:
    """Samples every 20 minutes for the runs that ended within the sample retention."""
    kept_from = now - timedelta(seconds=settings.SAMPLE_RETENTION_SECONDS)
    idle_from = {
        (one.request.pk, attempt): run.idle_from
        for one in drawn
        for attempt, run in enumerate(one.runs, start=1)
    }
    samples = []
    for allocation in allocations:
        if allocation.ended_at is None or allocation.started_at is None:
            continue
        if allocation.ended_at < kept_from:
            continue
        request = allocation.request
        memory = request.gpu_memory_mib or request.flavor.gpu_memory_mib
        # Notebooks idle more than jobs; some jobs are memory-light (right-sizing hints).
        busy = (20, 70) if request.kind == WorkloadKind.NOTEBOOK else (55, 97)
        memory_share = draw.uniform(0.25, 0.9)
        quiet = idle_from.get((request.pk, allocation.attempt))
        moment = max(allocation.started_at, kept_from) + timedelta(minutes=1)
        while moment < allocation.ended_at:
            idle = quiet is not None and moment >= quiet
            samples.append(
                UtilisationSample(
                    allocation=allocation,
                    sampled_at=moment,
                    activity_percent=round(draw.uniform(0, 3) if idle else draw.uniform(*busy), 1),
                    memory_used_mib=int(memory * (0.05 if idle else memory_share)),
                )
            )
            moment += timedelta(minutes=20)
    UtilisationSample.objects.bulk_create(samples, batch_size=1000)
