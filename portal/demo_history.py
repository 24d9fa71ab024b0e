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
3. Add the usage of every run through the accounting's own bulk ingest (`ingest_usage`), and
   mark each allocation fully metered, so the live meter never counts it again.
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
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.db.models import Field, Sum
from django.utils import timezone

from accounting.choices import ALERT_THRESHOLDS_PERCENT, BudgetUnit, OverBudgetPolicy
from accounting.models import (
    AllocationMeter,
    Budget,
    BudgetAlert,
    DailyUsage,
    MonthlyUsage,
    Price,
    Statement,
    StatementLine,
    TeamMonthlyUsage,
)
from accounting.periods import (
    billing_zone,
    local_midnight,
    month_bounds,
    month_of,
    next_month,
    split_by_day,
)
from accounting.services import ingest_usage
from scheduling.choices import FlavorKind, Priority, RequestStatus, WorkloadKind
from scheduling.models import Allocation, Flavor, GpuRequest, Node, UtilisationSample
from tenants.models import AuditEvent, Project, Team

HISTORY_MARKER = "demo.history_seeded"
SEED = 20260101
SIX_PLACES = Decimal("0.000001")
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
    drawn.sort(key=lambda d: d.created_at)
    # 2. Requests, allocations and audit events.
    requests = GpuRequest.objects.bulk_create([d.request for d in drawn], batch_size=500)
    for one, request in zip(drawn, requests, strict=True):
        request.created_at, request.updated_at = one.created_at, one.updated_at
    GpuRequest.objects.bulk_update(requests, ["created_at", "updated_at"], batch_size=500)
    allocations = _write_allocations(drawn, nodes, draw)
    _write_events(drawn)
    # 3. Usage, through the ledger's bulk ingest; the meter leaves these allocations alone.
    ingest_usage(_usage_rows(allocations))
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
    _write_budgets(teams, users, projects, start, now)
    _close_months(teams, users["fiona"], start, now)
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


def _write_allocations(
    drawn: list[Drawn], nodes: dict[int, list[str]], draw: random.Random
) -> list[Allocation]:
    allocations: list[Allocation] = []
    moments: list[datetime] = []
    for one in drawn:
        request = one.request
        pool_id = request.flavor.pool_id
        for attempt, run in enumerate(one.runs, start=1):
            node = draw.choice(nodes[pool_id]) if nodes[pool_id] else ""
            claims = [
                {
                    "node": node,
                    "device_index": (index + draw.randrange(8)) % 8,
                    "whole": request.flavor.kind == FlavorKind.WHOLE,
                    "memory_mib": request.gpu_memory_mib or request.flavor.gpu_memory_mib,
                    "cores_percent": request.gpu_cores_percent or request.flavor.gpu_cores_percent,
                    "mig_profile": request.flavor.mig_profile,
                    "mig_start": None,
                }
                for index in range(request.gpu_count)
            ]
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


AUDIT_COLUMNS = (
    "occurred_at",
    "actor",
    "action",
    "target_type",
    "target_id",
    "team",
    "project",
    "message",
    "data",
)


def insert_audit_events(events: list[tuple[datetime, AuditEvent]]) -> None:
    """Append past audit events, each with the moment it happened.

    Raw SQL: the model stamps `occurred_at` with the present on every INSERT (`auto_now_add`,
    also in `bulk_create`) and the trail refuses any UPDATE (a PostgreSQL trigger), so the
    history goes in through one parameterised INSERT, its values prepared by the model's fields.
    """
    fields: list[Field[Any, Any]] = [
        field
        for name in AUDIT_COLUMNS
        if isinstance(field := AuditEvent._meta.get_field(name), Field)
    ]
    columns = ", ".join(connection.ops.quote_name(str(f.column)) for f in fields)
    placeholders = ", ".join(["%s"] * len(fields))
    rows = []
    for at, event in sorted(events, key=lambda pair: pair[0]):
        event.occurred_at = at
        rows.append([f.get_db_prep_save(getattr(event, f.attname), connection) for f in fields])
    table = connection.ops.quote_name(AuditEvent._meta.db_table)
    with connection.cursor() as cursor:
        cursor.executemany(f"INSERT INTO {table} ({columns}) VALUES ({placeholders})", rows)


def _usage_rows(allocations: list[Allocation]) -> list[tuple[Any, ...]]:
    """The pieces of usage of every run (one per billing day), priced as the meter prices."""
    zone = billing_zone()
    prices: dict[int, list[Price]] = defaultdict(list)
    for price in Price.objects.order_by("effective_from"):
        prices[price.flavor_id].append(price)
    rows = []
    for allocation in allocations:
        request = allocation.request
        if allocation.started_at is None or allocation.ended_at is None:
            continue
        flavor_prices = prices[request.flavor_id]
        cuts = [p.effective_from for p in flavor_prices]
        for piece in split_by_day(
            allocation.started_at, allocation.ended_at, zone, extra_cuts=cuts
        ):
            seconds = Decimal((piece.end - piece.start).total_seconds())
            hours = seconds / HOUR
            price = None
            for candidate in flavor_prices:
                if candidate.effective_from <= piece.start:
                    price = candidate
            cost = Decimal(0)
            if price is not None:
                rate = price.price_per_hour * request.gpu_count
                if allocation.is_preemptible:
                    rate *= price.preemptible_multiplier
                rate *= price.multiplier_for(request.priority)
                cost = (rate * hours).quantize(SIX_PLACES)
            rows.append(
                (
                    allocation.pk,
                    piece.month.isoformat(),
                    piece.day.isoformat(),
                    request.team_id,
                    request.project_id,
                    request.flavor_id,
                    allocation.pool_id,
                    request.owner_id,
                    request.gpu_count,
                    allocation.is_preemptible,
                    piece.start.isoformat(),
                    piece.end.isoformat(),
                    seconds.quantize(SIX_PLACES),
                    (request.gpu_equivalent * hours).quantize(SIX_PLACES),
                    cost,
                )
            )
    return rows


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


def _write_budgets(
    teams: dict[str, Team],
    users: dict[str, Any],
    projects: dict[str, list[Project]],
    start: datetime,
    now: datetime,
) -> None:
    """A team money budget that past months often crossed, and a project GPU-hour budget that
    this month's work is close to: both with the alerts they fired, month by month."""
    zone = billing_zone()
    this_month = month_of(now, zone)
    vision, speech = teams["vision"], teams["speech"]
    full_months = [
        row["total"]
        for row in TeamMonthlyUsage.objects.filter(team=vision, period__lt=this_month)
        .values("period")
        .annotate(total=Sum("cost"))
        if row["period"] >= month_of(start, zone)
    ]
    typical = max(full_months, default=Decimal(1000))
    money = Budget(
        team=vision,
        unit=BudgetUnit.MONEY,
        amount=max(Decimal(100), (typical * Decimal("0.009")).quantize(Decimal(1)) * 100),
        over_budget_policy=OverBudgetPolicy.NOTIFY,
    )
    asr = projects["speech"][0]
    month_to_date = DailyUsage.objects.filter(project=asr, day__gte=this_month).aggregate(
        total=Sum("gpu_hours")
    )["total"] or Decimal(0)
    hours = Budget(
        team=speech,
        project=asr,
        unit=BudgetUnit.GPU_HOURS,
        amount=max(Decimal(5), (month_to_date / Decimal("0.85")).quantize(Decimal(1))),
        over_budget_policy=OverBudgetPolicy.NOTIFY,
    )
    created = [(money, users["bob"]), (hours, users["dan"])]
    Budget.objects.bulk_create([budget for budget, _ in created])
    Budget.objects.filter(pk__in=[b.pk for b, _ in created]).update(created_at=start)
    events: list[tuple[datetime, AuditEvent]] = []
    for budget, lead in created:
        events.append(
            (
                start,
                AuditEvent(
                    actor=lead,
                    action="budget.created",
                    target_type="Budget",
                    target_id=str(budget.pk),
                    team=budget.team,
                    project=budget.project,
                    data={
                        "unit": budget.unit,
                        "amount": str(budget.amount),
                        "policy": budget.over_budget_policy,
                    },
                ),
            )
        )
        events += _alerts_of(budget, start=start, now=now)
    insert_audit_events(events)


def _alerts_of(budget: Budget, *, start: datetime, now: datetime) -> list[tuple[datetime, Any]]:
    """The 80 % and 100 % alerts the budget fired each month, on the day it crossed them."""
    zone = billing_zone()
    rows = DailyUsage.objects.filter(team=budget.team, day__gte=start.astimezone(zone).date())
    if budget.project_id:
        rows = rows.filter(project_id=budget.project_id)
    column = "gpu_hours" if budget.unit == BudgetUnit.GPU_HOURS else "cost"
    spent: dict[Any, Decimal] = defaultdict(Decimal)
    events = []
    owner = budget.project or budget.team
    unit = "GPU-hours" if budget.unit == BudgetUnit.GPU_HOURS else budget.get_unit_display()
    per_day = rows.values("day").annotate(total=Sum(column)).order_by("day")
    for row in per_day:
        month = row["day"].replace(day=1)
        before = spent[month]
        spent[month] += row["total"]
        for threshold in ALERT_THRESHOLDS_PERCENT:
            line = budget.amount * threshold / 100
            if not before < line <= spent[month]:
                continue
            fired = min(local_midnight(row["day"], zone) + timedelta(hours=18), now)
            alert = BudgetAlert.objects.create(
                budget=budget, period=month, threshold_percent=threshold, spent=spent[month]
            )
            BudgetAlert.objects.filter(pk=alert.pk).update(fired_at=fired)
            message = (
                f"The {month:%Y-%m} budget of {owner} is at {threshold} %: "
                f"{spent[month].quantize(Decimal('0.01'))} of {budget.amount} {unit}."
            )
            event = AuditEvent(
                action=f"budget.alert_{threshold}",
                target_type="Budget",
                target_id=str(budget.pk),
                team=budget.team,
                project=budget.project,
                message=message,
                data={
                    "period": f"{month:%Y-%m}",
                    "spent": str(spent[month]),
                    "amount": str(budget.amount),
                },
            )
            events.append((fired, event))
    return events


def _close_months(teams: dict[str, Team], closer: Any, start: datetime, now: datetime) -> None:
    """Finance closed every month that is over on the second day of the next one.

    The same statement `close_statement` writes (the month's rollup per project × flavor ×
    pool, names copied), dated when it was closed: the service stamps the present, and the
    audit trail takes no backdating UPDATE.
    """
    zone = billing_zone()
    this_month = month_of(now, zone)
    month = month_of(start, zone)
    events: list[tuple[datetime, AuditEvent]] = []
    while month < this_month:
        closed_at = month_bounds(next_month(month), zone)[0] + timedelta(days=1, hours=9)
        closed_at = min(closed_at, now)
        for team in teams.values():
            sums = (
                MonthlyUsage.objects.filter(team=team, period=month)
                .values("project_id", "project__name", "flavor__name", "pool__name")
                .annotate(gpu_hours=Sum("gpu_hours"), cost=Sum("cost"))
                .order_by("project__name", "flavor__name", "pool__name")
            )
            lines = [
                StatementLine(
                    project_id_copy=row["project_id"],
                    project_name=row["project__name"],
                    flavor_name=row["flavor__name"],
                    pool_name=row["pool__name"],
                    gpu_hours=row["gpu_hours"],
                    cost=row["cost"],
                )
                for row in sums
            ]
            statement = Statement.objects.create(
                team=team,
                period=month,
                currency=settings.PORTAL_CURRENCY,
                gpu_hours=sum((line.gpu_hours for line in lines), Decimal(0)),
                cost=sum((line.cost for line in lines), Decimal(0)),
                closed_by=closer,
            )
            Statement.objects.filter(pk=statement.pk).update(closed_at=closed_at)
            for line in lines:
                line.statement = statement
            StatementLine.objects.bulk_create(lines)
            event = AuditEvent(
                actor=closer,
                action="statement.closed",
                target_type="Statement",
                target_id=str(statement.pk),
                team=team,
                message=f"{team} {month:%Y-%m}: {statement.cost} {statement.currency}",
                data={"period": f"{month:%Y-%m}", "lines": len(lines), "cost": str(statement.cost)},
            )
            events.append((closed_at, event))
        month = next_month(month)
    insert_audit_events(events)
