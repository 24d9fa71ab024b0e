"""The scheduling cycle: (1) read a snapshot, (2) let the engine decide, (3) write the plan in one
transaction, (4) act after commit (launches and terminations go to Celery).

Exactly one cycle acts at a time across all workers and replicas: a cycle first takes the
`scheduling-cycle` lease with a compare-and-set UPDATE; a second cycle that finds the lease held
returns at once. The lease expires by itself, so a killed worker cannot block scheduling; a
cycle renews it before it writes and drops its plan if the lease was taken over meanwhile.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.utils import timezone

from scheduling.choices import TRANSITIONS, RequestStatus
from scheduling.engine import planner
from scheduling.engine.types import Admission, Policy, Preemption, Reservation, Waiting
from scheduling.models import (
    Allocation,
    Cluster,
    GpuRequest,
    Node,
    NodePool,
    ReclaimPolicy,
    SchedulerLease,
)
from scheduling.selectors.scheduler_modes import flavor_pools_in, handed_to_kueue, kueue_cluster_ids
from scheduling.selectors.snapshot import build_snapshot, claims_as_json, ready_queue
from scheduling.services.blockers import record_blockers
from scheduling.services.lifecycle import Move, transition_each, transition_many
from scheduling.services.notifications import notify_each
from scheduling.services.queue_ranks import moved_ranks
from scheduling.services.row_updates import update_rows

log = logging.getLogger(__name__)

LEASE_NAME = "scheduling-cycle"
LEASE_SECONDS = 60
POLICY = Policy(
    reservation_wait_seconds=settings.SCHEDULING_RESERVATION_WAIT_SECONDS,
    priority_aging_seconds=settings.SCHEDULING_PRIORITY_AGING_SECONDS,
    fair_share_in_team=settings.SCHEDULING_FAIR_SHARE_IN_TEAM,
)


def _pid_namespace() -> str:
    """The PID namespace of this process ('' where /proc has none): PIDs compare only within it."""
    try:
        return os.readlink("/proc/self/ns/pid").removeprefix("pid:").strip("[]")
    except OSError:
        return ""


def _holder() -> str:
    return f"{socket.gethostname()}:{_pid_namespace()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def holder_is_dead(holder: str) -> bool:
    """True only if `holder` ran on this host, in this PID namespace, and its process is gone.

    A worker SIGKILLed inside a cycle would otherwise block every cycle until its lease expires
    (a minute). Any doubt — another host or namespace, a live or reused PID — answers False,
    and the lease then simply expires.
    """
    host, namespace, pid, _token = ([*holder.split(":"), "", "", "", ""])[:4]
    if host != socket.gethostname() or namespace != _pid_namespace() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:  # a zombie (killed, not yet reaped by its parent) is dead too
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] == ["Z"]


def acquire_lease(*, name: str = LEASE_NAME, seconds: int = LEASE_SECONDS) -> str | None:
    """Take the lease if it is free, expired or held by a dead process of this host; returns
    the holder token, or None if busy."""
    _release_leftovers()
    now = timezone.now()
    holder = _holder()
    # Created concurrently by another cycle is fine: the UPDATE below decides who holds it.
    with contextlib.suppress(IntegrityError):
        SchedulerLease.objects.get_or_create(
            name=name, defaults={"holder": "", "expires_at": now - timedelta(seconds=1)}
        )
    taken = SchedulerLease.objects.filter(name=name, expires_at__lt=now).update(
        holder=holder, expires_at=now + timedelta(seconds=seconds)
    )
    if not taken:
        current = SchedulerLease.objects.filter(name=name).values_list("holder", flat=True).first()
        if current and holder_is_dead(current):
            log.warning("taking over the scheduling lease of dead holder %s", current)
            # Compare-and-set on the dead holder: of two cycles noticing it, one takes over.
            taken = SchedulerLease.objects.filter(name=name, holder=current).update(
                holder=holder, expires_at=now + timedelta(seconds=seconds)
            )
    return holder if taken else None


def renew_lease(holder: str, *, name: str = LEASE_NAME, seconds: int = LEASE_SECONDS) -> bool:
    """Extend the lease if `holder` still has it; inside a transaction its row stays locked."""
    renewed = SchedulerLease.objects.filter(name=name, holder=holder).update(
        expires_at=timezone.now() + timedelta(seconds=seconds)
    )
    return bool(renewed)


def release_lease(holder: str, *, name: str = LEASE_NAME, cycle_seconds: float = 0.0) -> None:
    SchedulerLease.objects.filter(name=name, holder=holder).update(
        holder="",
        expires_at=timezone.now() - timedelta(seconds=1),
        last_cycle_seconds=cycle_seconds,
    )


# Leases this process could not release because the database was gone at the time.
_unreleased: set[str] = set()


def _release_after_cycle(holder: str, cycle_seconds: float) -> None:
    """Release, or remember to: a lease left held by a live process blocks every cycle until
    it expires (a minute), which is what a database restart mid-cycle used to cause."""
    try:
        release_lease(holder, cycle_seconds=cycle_seconds)
    except DatabaseError:
        log.warning("could not release the scheduling lease %s; retrying next cycle", holder)
        _unreleased.add(holder)


def _release_leftovers() -> None:
    for holder in list(_unreleased):
        with contextlib.suppress(DatabaseError):
            release_lease(holder)
            _unreleased.discard(holder)


@dataclass
class CycleResult:
    ran: bool
    admitted: list[int] = field(default_factory=list)
    preempted: list[int] = field(default_factory=list)
    waiting: int = 0
    seconds: float = 0.0
    # The split of `seconds`: (1) snapshot read, (2) engine plan, (3) the writes and the commit
    # (with the after-commit callbacks, which Django runs as the transaction closes).
    read_seconds: float = 0.0
    plan_seconds: float = 0.0
    write_seconds: float = 0.0


def run_cycle(
    *,
    on_admit: Callable[[int, int], None] | None = None,
    on_preempt: Callable[[int, int], None] | None = None,
    on_start: Callable[[], None] | None = None,
    now: float | None = None,
) -> CycleResult:
    """One cycle; `on_start()` runs once the lease is held, before the read;
    `on_admit(request_id, attempt)` and `on_preempt(…)` run after commit.

    The requests of Kueue-mode clusters (scheduling/selectors/scheduler_modes.py) are handed to
    Kueue first; the engine then plans the rest on a snapshot without those clusters. With no
    portal-mode cluster left the engine does not run.
    """
    holder = acquire_lease()
    if holder is None:
        return CycleResult(ran=False)
    if on_start:
        on_start()
    started = time.perf_counter()
    try:
        kueue = kueue_cluster_ids()
        if not kueue:
            return _plan_with_engine(
                holder, started=started, now=now, on_admit=on_admit, on_preempt=on_preempt
            )
        handed = _hand_to_kueue(holder, kueue, started=started, on_admit=on_admit)
        if not handed.ran or not Cluster.objects.exclude(pk__in=kueue).exists():
            return handed
        planned = _plan_with_engine(
            holder,
            started=time.perf_counter(),
            now=now,
            on_admit=on_admit,
            on_preempt=on_preempt,
            kueue=kueue,
        )
        if not planned.ran:
            return handed
        return CycleResult(
            ran=True,
            admitted=handed.admitted + planned.admitted,
            preempted=planned.preempted,
            waiting=planned.waiting,
            seconds=time.perf_counter() - started,
            read_seconds=handed.read_seconds + planned.read_seconds,
            plan_seconds=planned.plan_seconds,
            write_seconds=handed.write_seconds + planned.write_seconds,
        )
    finally:
        _release_after_cycle(holder, time.perf_counter() - started)


def _plan_with_engine(
    holder: str,
    *,
    started: float,
    now: float | None,
    on_admit: Callable[[int, int], None] | None,
    on_preempt: Callable[[int, int], None] | None,
    kueue: frozenset[int] = frozenset(),
) -> CycleResult:
    """The engine's part of a cycle, for every cluster but the Kueue ones `kueue`."""
    # 1. Read.
    snapshot = build_snapshot(kueue_clusters=kueue)
    read_done = time.perf_counter()
    # 2. Decide, on the clock the rows it read were written with (queued_at, started_at).
    moment = now if now is not None else timezone.now().timestamp()
    plan = planner.plan(snapshot, now=moment, policy=POLICY)
    plan_done = time.perf_counter()
    # 3. Write.
    result = CycleResult(
        ran=True,
        waiting=len(plan.waiting),
        read_seconds=read_done - started,
        plan_seconds=plan_done - read_done,
    )
    with transaction.atomic():
        # The plan is only as good as the lease: renew it (its row stays locked until
        # commit, so no other cycle can take it over meanwhile), or write nothing if another
        # cycle took it over while this one read and planned.
        if not renew_lease(holder):
            log.warning("the scheduling lease expired during planning; the plan is dropped")
            return CycleResult(ran=False)
        for victim_id, attempt in _preempt(plan.preemptions):
            result.preempted.append(victim_id)
            if on_preempt:
                _after_commit(on_preempt, victim_id, attempt)
        for request_id, attempt in _admit(plan.admissions):
            result.admitted.append(request_id)
            if on_admit:
                _after_commit(on_admit, request_id, attempt)
        _record_waiting(plan.waiting, plan.reservations)
        record_blockers(snapshot, plan)
    result.write_seconds = time.perf_counter() - plan_done
    # 4. Act: the on_commit callbacks above enqueue launches and terminations.
    result.seconds = time.perf_counter() - started
    return result


def _after_commit(act: Callable[[int, int], None], request_id: int, attempt: int) -> None:
    transaction.on_commit(lambda: act(request_id, attempt))


def _admit(admissions: tuple[Admission, ...]) -> list[tuple[int, int]]:
    """Admit the plan's requests that are still queued, each with its allocation, in batches.

    Returns (request id, attempt) of each admitted request, in the plan's order.
    """
    by_id = {int(admission.request_id): admission for admission in admissions}
    # The pool for the allocation, team and project for the audit events: one read of only
    # those (whole rows of the four tables took twice as long at 13,600 admissions).
    requests = (
        GpuRequest.objects.select_related("flavor", "team", "project")
        .only("status", "attempt", "is_preemptible", "flavor__pool", "team__id", "project__id")
        .in_bulk(list(by_id))
    )
    admitted: list[GpuRequest] = []
    for borrowed in (False, True):
        group = [
            request
            for pk, request in requests.items()
            if by_id[pk].borrowed is borrowed and request.status == RequestStatus.QUEUED
        ]
        reason = "Admitted: capacity reserved, launching." + (
            " Runs on borrowed quota and may be preempted." if borrowed else ""
        )
        admitted += transition_many(
            group,
            Move(RequestStatus.ADMITTED, reason),
            next_attempt=True,
            waiting_reason="",
            queue_position=None,
            queue_rank=None,
        )
    # A flavor offered in several pools runs in the pool of the node the engine chose.
    placed_nodes = {node for admission in admissions for node in admission.node_ids}
    node_pools = dict(Node.objects.filter(name__in=placed_nodes).values_list("name", "pool_id"))
    Allocation.objects.bulk_create(
        [
            Allocation(
                request=request,
                attempt=request.attempt,
                pool_id=_pool_of(by_id[request.pk], node_pools, request.flavor.pool_id),
                claims=claims_as_json(by_id[request.pk].placement),
                is_borrowed=by_id[request.pk].borrowed,
                is_preemptible=by_id[request.pk].preemptible or request.is_preemptible,
                node_name=",".join(by_id[request.pk].node_ids),
            )
            for request in admitted
        ],
        batch_size=500,
    )
    attempts = {request.pk: request.attempt for request in admitted}
    return [(pk, attempts[pk]) for pk in by_id if pk in attempts]


def _pool_of(admission: Admission, node_pools: dict[str, int], default: int) -> int:
    """The pool of the admission's first node; the flavor's own when it names no node."""
    nodes = admission.node_ids
    return node_pools.get(nodes[0], default) if nodes else default


def _hand_to_kueue(
    holder: str,
    kueue: frozenset[int],
    *,
    started: float,
    on_admit: Callable[[int, int], None] | None,
) -> CycleResult:
    """The Kueue clusters' part of a cycle, without the engine. Every queued request of the
    clusters `kueue` is admitted at once into an allocation with no node and no claims, in its
    flavor's pool on its cluster, so the launch path creates its Job suspended in the project's
    LocalQueue there; Kueue holds the Job until the team's ClusterQueue has quota, and the
    request shows why meanwhile (runtime/services/kueue_admission.py).
    """
    # 1. Read: the queue, oldest first, and the flavors' pools on the clusters requests name.
    queued = list(
        ready_queue()
        .filter(handed_to_kueue(kueue))
        .select_related("flavor__pool", "team", "project")
        .order_by("queued_at", "pk")
    )
    named = {request.cluster_id for request in queued if request.cluster_id is not None}
    pools_in = {cluster_id: flavor_pools_in(cluster_id) for cluster_id in named}
    read_done = time.perf_counter()
    # 2. Decide: nothing to decide, Kueue does.
    result = CycleResult(ran=True, read_seconds=read_done - started)
    # 3. Write.
    with transaction.atomic():
        if not renew_lease(holder):
            log.warning("the scheduling lease expired while reading; nothing is handed over")
            return CycleResult(ran=False)
        admitted = transition_many(
            queued,
            Move(RequestStatus.ADMITTED, "Handed to Kueue, which admits it when quota allows."),
            next_attempt=True,
            waiting_reason="",
            waiting_code="",
            queue_position=None,
            queue_rank=None,
        )
        Allocation.objects.bulk_create(
            [
                Allocation(
                    request=request,
                    attempt=request.attempt,
                    pool=_kueue_pool(request, pools_in),
                    claims=[],
                    is_preemptible=request.is_preemptible,
                    node_name="",
                )
                for request in admitted
            ],
            batch_size=500,
        )
        for request in admitted:
            result.admitted.append(request.pk)
            if on_admit:
                # 4. Act: launch after commit.
                _after_commit(on_admit, request.pk, request.attempt)
    result.write_seconds = time.perf_counter() - read_done
    result.seconds = time.perf_counter() - started
    return result


def _kueue_pool(request: GpuRequest, pools_in: dict[int, dict[int, NodePool]]) -> NodePool:
    """The flavor's pool on the cluster the request names, else the flavor's own pool."""
    if request.cluster_id is None:
        return request.flavor.pool
    return pools_in[request.cluster_id].get(request.flavor_id, request.flavor.pool)


def _preempt(preemptions: tuple[Preemption, ...]) -> list[tuple[int, int]]:
    """Evict the plan's victims, in batches: each one's allocation ends now and it goes back to
    the queue with its age, or fails once its tier's retry limit is used up.

    A victim whose allocation has already ended, or which has meanwhile left the states that can
    be preempted, is left alone. Returns (request id, attempt of the ended allocation) of each
    victim evicted, in the plan's order.
    """
    reason_of: dict[int, str] = {}
    cause_of: dict[int, Preemption] = {}
    for preemption in preemptions:
        victim = int(preemption.victim_id)
        if victim not in cause_of:
            cause_of[victim] = preemption
            reason_of[victim] = (
                f"Preempted for request {preemption.for_request}: {preemption.reason}"
            )
    if not reason_of:
        return []
    # 1. Read the victims, their running allocations, their tiers' retry limits and the teams
    # of the requests they make room for: four reads.
    requests = GpuRequest.objects.select_related(
        "flavor__pool__tier", "owner", "team", "project"
    ).in_bulk(list(reason_of))
    team_of = dict(
        GpuRequest.objects.filter(
            pk__in={int(p.for_request) for p in cause_of.values()}
        ).values_list("pk", "team__name")
    )
    allocation_of: dict[int, Allocation] = {}
    for allocation in Allocation.objects.active().filter(request_id__in=list(requests)):
        latest = allocation_of.get(allocation.request_id)
        if latest is None or allocation.admitted_at > latest.admitted_at:
            allocation_of[allocation.request_id] = allocation
    limits = dict(
        ReclaimPolicy.objects.filter(
            tier_id__in={request.flavor.pool.tier_id for request in requests.values()}
        ).values_list("tier_id", "max_attempts")
    )
    default_limit = ReclaimPolicy().max_attempts
    # 2. Move each one: preempted, then queued again or failed; audited move by move.
    paths: list[tuple[GpuRequest, list[Move]]] = []
    for pk, reason in reason_of.items():
        request = requests.get(pk)
        if request is None or pk not in allocation_of:
            continue
        if RequestStatus.PREEMPTED not in TRANSITIONS[request.status]:
            log.warning("request %s is %s; it is not preempted", pk, request.status)
            continue
        max_attempts = limits.get(request.flavor.pool.tier_id, default_limit)
        if request.attempt >= max_attempts:
            final = Move(
                RequestStatus.FAILED,
                f"Preempted on attempt {request.attempt} of {max_attempts}; not requeued again.",
            )
        else:
            final = Move(RequestStatus.QUEUED, "Requeued after preemption.")
        paths.append((request, [Move(RequestStatus.PREEMPTED, reason), final]))
    moved = transition_each(paths)
    # 3. End their allocations and record who preempted each one, why, and by when its pods
    # stop (the termination after commit gives them the tier's grace period).
    ended = [allocation_of[request.pk].pk for request in moved]
    now = timezone.now()
    for start in range(0, len(ended), 500):
        Allocation.objects.filter(pk__in=ended[start : start + 500], ended_at__isnull=True).update(
            ended_at=now, end_reason="preempted"
        )
    for request in moved:
        cause = cause_of[request.pk]
        request.preempted_by_id = int(cause.for_request)
        request.preemption_reason = cause.reason
        request.preempted_at = now
        request.preemption_deadline_at = now + timedelta(
            seconds=request.flavor.pool.tier.preemption_grace
        )
    GpuRequest.objects.bulk_update(
        moved,
        ["preempted_by", "preemption_reason", "preempted_at", "preemption_deadline_at"],
        batch_size=500,
    )
    # 4. Tell each owner, in one statement for all of them.
    notify_each([_preemption_notice(request, team_of) for request in moved])
    attempts = {request.pk: allocation_of[request.pk].attempt for request in moved}
    return [(pk, attempts[pk]) for pk in reason_of if pk in attempts]


def _preemption_notice(
    request: GpuRequest, team_of: dict[int, str]
) -> tuple[list[Any], str, str, dict[str, Any]]:
    """The owner's notice of a preemption: who it made room for (the request and its team,
    nothing more of another tenant's), why, and the deadline its pods were given."""
    by = request.preempted_by_id
    team = team_of.get(by or 0, "")
    deadline = request.preemption_deadline_at
    grace = request.flavor.pool.tier.preemption_grace
    stop = (
        f"Its pods get SIGTERM now and are stopped at {deadline:%Y-%m-%d %H:%M:%S} UTC "
        f"({grace} s to checkpoint; the file named by $PREEMPT_NOTICE holds the deadline)."
        if deadline is not None
        else ""
    )
    event = {
        "request": request.pk,
        "preempted_by": {"id": by, "team": team},
        "reason": request.preemption_reason,
        "deadline": deadline.isoformat() if deadline is not None else None,
    }
    who = f"Preempted for request {by} of team {team}: {request.preemption_reason}"
    if request.status == RequestStatus.FAILED:
        return (
            [request.owner],
            f"GPU request {request.label} was preempted and not requeued",
            f"{who.rstrip('.')}. {stop} {request.status_reason} Submit it again to run it.",
            {"type": "request.preempted_final", **event},
        )
    return (
        [request.owner],
        f"GPU request {request.label} was preempted and is queued again",
        f"{who.rstrip('.')}. {stop} It runs again when placed.",
        {"type": "request.preempted", **event},
    )


def _record_waiting(
    waiting: tuple[Waiting, ...], reservations: tuple[Reservation, ...] = ()
) -> int:
    """Store why each still-queued request waits, the kind of wait, when capacity is reserved
    for it (backfilling) and its queue rank; returns the rows written.

    Only rows where any of these changed are written, so a quiet cycle writes nothing. The rank
    is what keeps that true while the queue moves: a request keeps its rank while the requests
    around it come and go (queue_ranks.py), and pages count its position from the ranks. A
    queued request the plan no longer lists loses its rank, so it is not counted ahead of others;
    a quota-blocked one has none either: it waits for its team's usage, not for its turn.
    """
    reserved = {
        int(r.request_id): datetime.fromtimestamp(round(r.start_at), tz=UTC) for r in reservations
    }
    fields = ["waiting_reason", "waiting_code", "reserved_start_at", "queue_rank"]
    stored: dict[int, tuple[Any, ...]] = {
        pk: tuple(values)
        for pk, *values in GpuRequest.objects.filter(status=RequestStatus.QUEUED).values_list(
            "pk", *fields
        )
    }
    in_order = sorted(
        (wait for wait in waiting if int(wait.request_id) in stored), key=lambda w: w.position
    )
    in_line = [int(wait.request_id) for wait in in_order if wait.code != "quota"]
    rank_of: dict[int, int | None] = dict.fromkeys(stored)
    rank_of.update((pk, stored[pk][3]) for pk in in_line)
    rank_of.update(moved_ranks(in_line, rank_of))
    changed: list[tuple[Any, ...]] = []
    for wait in in_order:
        pk = int(wait.request_id)
        values = (wait.reason, wait.code, reserved.get(pk), rank_of[pk])
        if values != stored[pk]:
            changed.append((pk, *values))
    listed = {int(wait.request_id) for wait in in_order}
    changed += [
        (pk, *values[:3], None)
        for pk, values in stored.items()
        if values[3] is not None and pk not in listed
    ]
    if connection.vendor == "postgresql":
        return update_rows(GpuRequest, fields, changed, status=RequestStatus.QUEUED)
    GpuRequest.objects.bulk_update(
        [GpuRequest(pk=pk, **dict(zip(fields, values, strict=True))) for pk, *values in changed],
        fields,
        batch_size=500,
    )
    return len(changed)
