"""Demo traffic: the demo's people keep working while a visitor looks around.

Under `make run` (DEMO_TRAFFIC, simulated cluster only) one step runs every
DEMO_TRAFFIC_SECONDS. Each person has habits: kinds of work they keep going, a few at a time,
submitted through the same services as the portal's forms. Within about five minutes the
visitor sees:

- an approval waiting for bob: alice keeps whole-card A100 training jobs coming, which the
  training tier sends to the lead; bob approves each after `LEAD_DELAY_SECONDS`, and the ones
  beyond the team's guarantee run on borrowed A100s that no team is guaranteed;
- a preemption: carol's speech team fills the L4 vGPU pool with serving fleets, half of them on
  borrowed quota (dan approves them); once they run, alice opens a notebook within vision's
  guarantee and the scheduler preempts one borrowed fleet, which queues again. A visitor's
  own L4 notebooks do not stop it: each fleet asks for no more shares than a node has free
  (a fleet still waiting for dan or for room when the visitor takes some is asked for again,
  smaller), and the notebook for one share more than any node has free once the fleets stop
  growing;
- an idle warning, then a reclaim: alice leaves an exploration notebook open and walks away;
- a timeout: carol's quick-check notebook reaches its three-minute max runtime;
- rejections: dan turns down high-priority fine-tuning that is not urgent;

and within about ten minutes a reservation: alice's two five-card sweeps leave three free A100s
on each node, so bob's four-card run waits for a whole node, holds a reservation once it waited
SCHEDULING_RESERVATION_WAIT_SECONDS (two minutes under `make run`), alice's two-card jobs
run only where they do not delay it, and bob's run starts by the reservation's start.

A step does three things, in order:
1. the leads decide: pending requests older than `LEAD_DELAY_SECONDS` are approved, and
   high-priority ones rejected with a comment;
2. the people act on their running work: in the simulated cluster a workload's activity and a
   job's run time are drawn at launch, so a notebook left open goes quiet, a serving fleet
   stays busy and a job of a habit with `runs_seconds` runs that long here;
3. each habit short of its count submits one request, while the demo people hold fewer than
   DEMO_TRAFFIC_MAX_LIVE live requests of the habits: the fleet never fills with demo work for
   good, as every request it submits ends by itself, by timeout or by idle reclaim. A visitor's
   requests as a demo user do not count.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import F, Q
from django.utils import timezone

from runtime.models import SimulatedWorkload
from scheduling.choices import COMMITTED_STATUSES, Priority, RequestStatus, WorkloadKind
from scheduling.engine.filters import vgpu_fits
from scheduling.engine.state import FleetState
from scheduling.models import Allocation, Flavor, GpuRequest
from scheduling.selectors.snapshot import build_snapshot
from scheduling.services.requests import (
    GpuRequestSpec,
    approve_gpu_request,
    cancel_gpu_request,
    reject_gpu_request,
    submit_gpu_request,
)
from tenants.errors import DomainError
from tenants.models import Project

log = logging.getLogger(__name__)

LEAD_DELAY_SECONDS = 120
LIVE_STATUSES = frozenset({*COMMITTED_STATUSES, RequestStatus.PENDING_APPROVAL})
REJECTION = "Not urgent enough for high priority; submit it again at normal priority."
QUIET_PERCENT = (0, 2)
BUSY_PERCENT = (70, 95)
WAITS_FOR_ROOM = ("capacity", "reserved")  # waiting codes of work that waits for free cards


@dataclass(frozen=True, slots=True)
class Habit:
    """Work one demo person keeps going: `keep` live requests named `name` at any time."""

    name: str
    username: str
    project: str
    flavor: str
    kind: str
    gpu_count: int
    max_runtime_seconds: int
    keep: int = 1
    priority: str = Priority.NORMAL
    activity: str = ""  # "quiet" (walks away), "busy", or "" (as the simulation drew it)
    after: str = ""  # starts only once every request of the habit named here runs
    runs_seconds: int = 0  # a job runs this long once started (0: as the simulation drew it)
    # Takes back the guarantee from the habit named here: starts once that habit's requests
    # run or wait, some on borrowed quota, and asks one share more than any node of its pool
    # has free (at least `gpu_count`), so that only a preemption makes room (`_gpu_count`).
    reclaims: str = ""
    # Asks for at most as many shares as the node of its pool with the most room has free (at
    # least one), so that a visitor's notebooks in the pool do not keep it waiting.
    fits_free: bool = False


HABITS: tuple[Habit, ...] = (
    # Idle: a notebook left open goes quiet; warned, then reclaimed within ~5 minutes.
    Habit(
        "explore-coco", "alice", "detection", "h100-1g10gb", WorkloadKind.NOTEBOOK, 1, 2 * 3600,
        activity="quiet",
    ),
    # Timeout: a quick look with a three-minute max runtime.
    Habit(
        "quick-check", "carol", "asr", "h100-1g10gb", WorkloadKind.NOTEBOOK, 1, 180,
        activity="busy",
    ),
    # Preemption: the speech team fills the L4 pool, half of it on borrowed quota ...
    Habit(
        "asr-serving", "carol", "asr", "l4-12g", WorkloadKind.SERVICE, 4, 20 * 60,
        keep=4, activity="busy", fits_free=True,
    ),
    # ... and vision takes back its guarantee once it runs: one share when the fleets fill the
    # pool, more when a visitor's notebooks left room that no fleet fits.
    Habit(
        "detector-eval", "alice", "detection", "l4-12g", WorkloadKind.NOTEBOOK, 1, 10 * 60,
        activity="busy", reclaims="asr-serving",
    ),
    # Approval for bob, and lending: whole training cards need the lead; past vision's
    # guarantee (4 of its limit of 16) they run on unassigned A100s, borrowed.
    Habit(
        "detr-finetune", "alice", "detection", "a100-80g", WorkloadKind.JOB, 2, 3600,
        activity="busy", runs_seconds=180,
    ),
    # Reservation and backfilling: two sweeps hold five of the eight A100s on each node, so
    # bob's four-card run waits for a whole node; it holds a reservation once it waited
    # SCHEDULING_RESERVATION_WAIT_SECONDS, detr-finetune runs only where it does not delay
    # it, and it starts by the reservation's start (the sweeps end 90 s before their max
    # runtime). One detr-finetune at a time: 10 + 4 + 2 is vision's limit, and with more than
    # 12 A100s busy too few would be left to lend, a quota wait instead of one for capacity.
    Habit(
        "coco-pretrain", "alice", "detection", "a100-80g", WorkloadKind.JOB, 5, 8 * 60,
        keep=2, activity="busy", runs_seconds=390,
    ),
    Habit(
        "segformer-train", "bob", "segmentation", "a100-80g", WorkloadKind.JOB, 4, 3600,
        activity="busy", after="coco-pretrain",
    ),
    # Rejection: dan turns down high priority that is not urgent.
    Habit(
        "whisper-finetune", "carol", "tts", "h100-3g40gb", WorkloadKind.JOB, 1, 3600,
        priority=Priority.HIGH,
    ),
    # Steady background work that ends by itself (and sometimes fails).
    Habit("yolo-train", "bob", "segmentation", "h100-1g10gb", WorkloadKind.JOB, 1, 3600, keep=2),
    Habit("wav2vec-train", "dan", "tts", "h100-1g10gb", WorkloadKind.JOB, 1, 3600, keep=2),
)  # fmt: skip
IMAGES: dict[str, str] = {
    WorkloadKind.JOB: "pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime",
    WorkloadKind.NOTEBOOK: "jupyter/pytorch-notebook:2024-10-07",
    WorkloadKind.SERVICE: "vllm/vllm-openai:v0.6.3",
}
LEADS = {"vision": "bob", "speech": "dan"}


def traffic_enabled() -> bool:
    """On when DEMO_TRAFFIC is set and the cluster is the simulated one, never elsewhere."""
    return bool(settings.DEMO_TRAFFIC) and settings.CLUSTER_BACKEND == "simulated"


def traffic_step(*, now: datetime | None = None) -> Counter[str]:
    """One step of the demo's people (see the module docstring); what it did, by kind."""
    done: Counter[str] = Counter()
    if not traffic_enabled():
        return done
    now = now or timezone.now()
    users = {u.username: u for u in get_user_model().objects.filter(username__in=_usernames())}
    if len(users) < len(_usernames()):
        return done  # not the demo organisation
    # 1. The leads decide.
    _decide(users, now, done)
    # 2. The people act on their running work.
    _act(now, done)
    # 3. Habits short of their count submit, within the cap (asking again, smaller, for work
    # that waits for room a visitor's work took).
    _resize(users, done)
    _submit(users, now, done)
    return done


def _usernames() -> set[str]:
    return {habit.username for habit in HABITS} | set(LEADS.values())


def _decide(users: dict[str, Any], now: datetime, done: Counter[str]) -> None:
    waiting = GpuRequest.objects.filter(
        status=RequestStatus.PENDING_APPROVAL,
        owner__username__in=_usernames(),
        created_at__lte=now - timedelta(seconds=LEAD_DELAY_SECONDS),
    ).select_related("team", "project", "flavor__pool__tier", "owner")
    for request in waiting:
        lead = users[LEADS[request.team.slug]]
        try:
            if request.priority == Priority.HIGH:
                reject_gpu_request(actor=lead, request=request, comment=REJECTION)
                done["rejected"] += 1
            else:
                approve_gpu_request(actor=lead, request=request)
                done["approved"] += 1
        except DomainError as error:  # over the limit for now, or decided by a visitor
            log.debug("demo traffic: %s left request %s: %s", lead, request.pk, error)


def _act(now: datetime, done: Counter[str]) -> None:
    """Give each habit's running workloads the activity its person has, keep notebooks and
    services running until the portal stops them (the simulation reports no activity for them
    after their drawn end), and let jobs with `runs_seconds` run that long from their start."""
    activity = {habit.name: habit.activity for habit in HABITS if habit.activity}
    runs = {habit.name: habit.runs_seconds for habit in HABITS if habit.runs_seconds}
    running = GpuRequest.objects.filter(
        status__in=(RequestStatus.LAUNCHING, RequestStatus.RUNNING),
        owner__username__in=_usernames(),
        name__in=[*activity, *runs],
    ).values_list("pk", "attempt", "name", "max_runtime_seconds")
    for pk, attempt, name, max_runtime in running:
        workloads = SimulatedWorkload.objects.filter(request_key=str(pk), attempt=attempt)
        wanted = activity.get(name, "")
        if wanted:
            draw = random.Random(f"{pk}/{attempt}")
            low, high = QUIET_PERCENT if wanted == "quiet" else BUSY_PERCENT
            if wanted == "quiet":
                changed = workloads.exclude(utilisation_percent__lte=high)
            else:
                changed = workloads.exclude(utilisation_percent__gte=low)
            if changed.update(utilisation_percent=draw.randint(low, high)):
                done[f"went {wanted}"] += 1
        workloads.exclude(kind=WorkloadKind.JOB).filter(
            ends_at__lt=now + timedelta(seconds=max_runtime)
        ).update(ends_at=now + timedelta(seconds=max_runtime))
        if runs.get(name):
            planned = F("starts_at") + timedelta(seconds=runs[name])
            workloads.filter(kind=WorkloadKind.JOB).exclude(ends_at=planned).update(ends_at=planned)


def _resize(users: dict[str, Any], done: Counter[str]) -> None:
    """Cancel the requests of `fits_free` habits that wait for their lead or for room on one
    node while no node has room for all their shares but one has for some (a visitor's work
    took it after they were asked for); the habit then asks again at the size that fits.
    Preempted work waits as it is."""
    for habit in HABITS:
        if not habit.fits_free:
            continue
        waiting = GpuRequest.objects.filter(
            Q(status=RequestStatus.PENDING_APPROVAL)
            | Q(status=RequestStatus.QUEUED, waiting_code__in=WAITS_FOR_ROOM),
            name=habit.name,
            owner__username=habit.username,
            preempted_at__isnull=True,
        ).select_related("flavor__pool")
        for request in waiting:
            free, _ = _most_free(request.flavor)
            if not 0 < free < request.gpu_count:
                continue
            try:
                cancel_gpu_request(
                    actor=users[habit.username],
                    request=request,
                    reason=f"Asking again for the {free} shares that fit on one node.",
                )
            except DomainError as error:  # decided meanwhile
                log.debug("demo traffic: %s kept request %s: %s", habit.username, request.pk, error)
                continue
            done["resized"] += 1


def _submit(users: dict[str, Any], now: datetime, done: Counter[str]) -> None:
    # Only the habits' own requests count: a visitor's work as a demo user never holds them up.
    live = Counter(
        GpuRequest.objects.filter(
            status__in=LIVE_STATUSES,
            owner__username__in=_usernames(),
            name__in=[habit.name for habit in HABITS],
        ).values_list("name", flat=True)
    )
    room = settings.DEMO_TRAFFIC_MAX_LIVE - sum(live.values())
    projects = {p.slug: p for p in Project.objects.filter(team__slug__in=LEADS)}
    flavors = {f.slug: f for f in Flavor.objects.select_related("pool__tier")}
    for habit in HABITS:
        if room <= 0:
            done["capped"] += 1
            return
        if live[habit.name] >= habit.keep or not _ready(habit, live):
            continue
        if habit.project not in projects or habit.flavor not in flavors:
            continue
        flavor = flavors[habit.flavor]
        try:
            submit_gpu_request(
                actor=users[habit.username],
                spec=GpuRequestSpec(
                    project=projects[habit.project],
                    flavor=flavor,
                    gpu_count=_gpu_count(habit, flavor),
                    image=IMAGES[habit.kind],
                    command=["python", "train.py", "--run-id", f"{habit.name}-{now:%Y%m%d-%H%M%S}"]
                    if habit.kind == WorkloadKind.JOB
                    else [],
                    max_runtime_seconds=habit.max_runtime_seconds,
                    kind=habit.kind,
                    priority=habit.priority,
                    name=habit.name,
                ),
            )
        except DomainError as error:  # the visitor changed quotas, prices or the catalogue
            log.info("demo traffic: %s could not submit %s: %s", habit.username, habit.name, error)
            continue
        live[habit.name] += 1
        room -= 1
        done["submitted"] += 1


def _ready(habit: Habit, live: Counter[str]) -> bool:
    """A habit with `after` starts only once every request of that habit runs; one that
    `reclaims` once every request of that habit runs or waits after a scheduling cycle, and
    one of them runs on borrowed quota."""
    if habit.reclaims:
        keep = next(h.keep for h in HABITS if h.name == habit.reclaims)
        theirs = GpuRequest.objects.filter(
            name=habit.reclaims, status__in=LIVE_STATUSES, owner__username__in=_usernames()
        )
        settled = theirs.filter(
            Q(status=RequestStatus.RUNNING) | Q(status=RequestStatus.QUEUED, waiting_reason__gt="")
        )
        borrowed = Allocation.objects.filter(
            request__in=theirs.filter(status=RequestStatus.RUNNING),
            ended_at__isnull=True,
            is_borrowed=True,
        )
        return live[habit.reclaims] == keep == settled.count() and borrowed.exists()
    if not habit.after:
        return True
    keep = next(h.keep for h in HABITS if h.name == habit.after)
    running = GpuRequest.objects.filter(
        name=habit.after, status=RequestStatus.RUNNING, owner__username__in=_usernames()
    ).count()
    return running >= keep and live[habit.after] == keep


def _gpu_count(habit: Habit, flavor: Flavor) -> int:
    """The habit's size, or with `fits_free` or `reclaims` one set by the room left in the
    flavor's pool: the most cards on one node that fit one more share of the flavor."""
    if not (habit.fits_free or habit.reclaims):
        return habit.gpu_count
    free, cards = _most_free(flavor)
    if habit.fits_free:
        return max(1, min(habit.gpu_count, free))
    # One share more than fits: only a preemption of borrowed work makes room (when the
    # fleets fill the pool that is the habit's own size).
    return max(habit.gpu_count, min(free + 1, cards))


def _most_free(flavor: Flavor) -> tuple[int, int]:
    """(cards of the node of the flavor's pool with the most cards that fit one more share of
    the flavor, the most cards a node of the pool has)."""
    state = FleetState(build_snapshot())
    memory, cores = flavor.gpu_memory_mib or 0, flavor.gpu_cores_percent or 0
    free = cards = 0
    for node, pool in enumerate(state.node_pool):
        if pool != flavor.pool.slug or not state.node_schedulable[node]:
            continue
        devices = state.node_devices[node]
        cards = max(cards, len(devices))
        free = max(free, sum(1 for d in devices if vgpu_fits(state, d, memory, cores)))
    return free, cards
