"""The demo's past: `DEMO_HISTORY_DAYS` of requests, runs, usage, budgets and statements.

A visitor's first sign-in should find every dashboard and chart full, as in a portal that has
been in use for months. This module writes that past in bulk, from a seeded random draw, so the
same day seeds the same history:

1. Draw each team's requests day by day: every kind (job, notebook, service), every sharing mode
   (whole card, vGPU, MIG), approved at once or by the lead, rejected, expired, cancelled, run to
   success or failure, preempted and requeued, reclaimed for idleness or stopped at the timeout
   (`portal.demo_requests`).
2. Insert the requests and their allocations, each run on cards that had room for it
   (`portal.demo_placement`), in bulk (`bulk_create`, then the timestamps that
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
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from accounting.models import AllocationMeter
from accounting.services.ingest import WITH_HOST_COSTS, ingest_usage
from portal.demo_ledger import close_months, insert_audit_events, usage_rows, write_budgets
from portal.demo_placement import cards_of_nodes, write_allocations
from portal.demo_requests import (
    HOUR,
    PEOPLE,
    SEED,
    Drawn,
    draw_benchmarks,
    draw_request,
    waiting_for_leads,
)
from scheduling.choices import RequestStatus, WorkloadKind
from scheduling.models import (
    Allocation,
    Flavor,
    GpuRequest,
    Node,
    NodePool,
    UtilisationSample,
)
from tenants.choices import NotificationKind
from tenants.models import AuditEvent, Notification, Project, Team

HISTORY_MARKER = "demo.history_seeded"
PILOT_POOL, PILOT_DAYS_LEFT = "l4-vgpu", 30


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
                one = draw_request(
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
    drawn += waiting_for_leads(users, teams, projects, flavors, now)
    drawn += draw_benchmarks(users, teams, projects, flavors, nodes, days, now)
    drawn.sort(key=lambda d: d.created_at)
    # 2. Requests, allocations and audit events.
    requests = GpuRequest.objects.bulk_create([d.request for d in drawn], batch_size=500)
    for one, request in zip(drawn, requests, strict=True):
        request.created_at, request.updated_at = one.created_at, one.updated_at
    GpuRequest.objects.bulk_update(requests, ["created_at", "updated_at"], batch_size=500)
    allocations = write_allocations(drawn, nodes, draw, cards_of_nodes())
    _write_events(drawn)
    _write_notices(drawn, users)
    # 3. Usage, through the ledger's bulk ingest; the meter leaves these allocations alone.
    ingest_usage(usage_rows(allocations), columns=WITH_HOST_COSTS)
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
