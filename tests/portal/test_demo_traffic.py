"""Demo traffic: within five minutes a visitor sees queueing, an approval waiting for bob, a
preemption, an idle warning and reclaim, a timeout; within ten, a four-card run reserved and
started by its reservation while smaller work runs beside it on lent A100s; a visitor's own L4
notebooks and A100 jobs as alice leave the five-minute stories showing; and DEMO_TRAFFIC=0
schedules nothing.

Time is passed in: the clock moves 15 s per step (the demo's interval), and each step runs what
beat runs under `make run` — the traffic step, a scheduling cycle, workload sync, utilisation
sampling and the reclaim pass — with tasks executed inline on the simulated cluster.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.color import no_style
from django.db import connection
from django.db.models import Q
from django.utils import timezone

from portal.celery import app, demo_schedule
from portal.demo_traffic import HABITS, LIVE_STATUSES, traffic_step
from portal.management.commands.run_portal import demo_environment
from runtime.services import execution
from runtime.tasks import enforce_reclaim_policies, record_utilisation, sync_workloads
from scheduling.choices import RequestStatus
from scheduling.models import Allocation, Flavor, GpuRequest
from scheduling.selectors.approvals import approval_inbox
from scheduling.services import cycle, estimates
from scheduling.services.requests import GpuRequestSpec, submit_gpu_request
from scheduling.tasks import run_scheduling_cycle
from tenants.models import AuditEvent, Project

pytestmark = pytest.mark.django_db
STEP_SECONDS = 15


class Clock:
    def __init__(self) -> None:
        self.now = timezone.now()

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(timezone, "now", fake)
    return fake


@pytest.fixture
def history_days() -> int:
    return 0


@pytest.fixture
def demo(settings: Any, history_days: int) -> Iterator[None]:
    settings.DEMO_TRAFFIC = True
    settings.CLUSTER_BACKEND = "simulated"
    settings.SIMULATION_SPEED = 1.0
    settings.SAMPLE_INTERVAL_SECONDS = STEP_SECONDS
    settings.DEMO_TRAFFIC_MAX_LIVE = 16
    call_command("seed_demo", "--history-days", str(history_days))
    execution.cluster_backend.cache_clear()
    yield
    execution.cluster_backend.cache_clear()


def test_five_minutes_show_queueing_approval_lending_preemption_idle_reclaim_and_timeout(
    demo: None, clock: Clock, django_capture_on_commit_callbacks: Callable[..., Any]
) -> None:
    bob = get_user_model().objects.get(username="bob")
    did: Counter[str] = Counter()
    waited_for_bob = queued_with_reason = False
    most_live = 0
    for _ in range(20):  # five minutes
        clock.now += timedelta(seconds=STEP_SECONDS)
        for step in (traffic_step, run_scheduling_cycle, sync_workloads, enforce_reclaim_policies):
            with django_capture_on_commit_callbacks(execute=True):
                outcome = step()
            if step is traffic_step:
                did.update(outcome)
        record_utilisation()
        waited_for_bob |= approval_inbox(user=bob).exists()
        queued_with_reason |= (
            GpuRequest.objects.filter(status=RequestStatus.QUEUED)
            .exclude(waiting_reason="")
            .exists()
        )
        most_live = max(most_live, GpuRequest.objects.filter(status__in=LIVE_STATUSES).count())
    actions = Counter(AuditEvent.objects.values_list("action", flat=True))
    assert waited_for_bob
    assert queued_with_reason
    assert actions["request.preempted"] >= 1
    assert actions["reclaim.idle_warning"] >= 1
    assert actions["reclaim.idle"] >= 1
    assert actions["reclaim.timeout"] >= 1
    assert actions["request.rejected"] >= 1
    # Idle A100s nobody is guaranteed are lent past vision's guarantee: alice's two five-card
    # sweeps, admitted after her two-card job that fits the guarantee.
    lent = Allocation.objects.filter(request__flavor__slug="a100-80g").order_by("admitted_at", "pk")
    assert [(a.request.name, a.is_borrowed) for a in lent.select_related("request")] == [
        ("detr-finetune", False),
        ("coco-pretrain", True),
        ("coco-pretrain", True),
    ]
    assert did["approved"] >= 1
    # Bounded: never more live demo work than the habits keep.
    assert most_live <= sum(habit.keep for habit in HABITS)


@pytest.fixture
def fresh_request_ids() -> None:
    """Request ids from 1, as a fresh `make run` database gives them. The simulated cluster
    draws each workload's start delay and runtime from its name (its request's id), and the
    ids the test database's sequence reached depend on the tests that ran before."""
    sql = connection.ops.sequence_reset_by_name_sql(
        no_style(), [{"table": GpuRequest._meta.db_table, "column": "id"}]
    )
    with connection.cursor() as cursor:
        for statement in sql:
            cursor.execute(statement)


@pytest.mark.parametrize("history_days", [90])  # as `make run` seeds it: the estimates read it
def test_a_four_card_run_is_reserved_and_starts_by_it_while_idle_a100s_are_lent(
    fresh_request_ids: None,
    demo: None,
    clock: Clock,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    # The demo's reservation wait, as `make run` sets it.
    wait = float(demo_environment({}, host="127.0.0.1")["SCHEDULING_RESERVATION_WAIT_SECONDS"])
    assert wait == 120
    policy = replace(cycle.POLICY, reservation_wait_seconds=wait)
    monkeypatch.setattr(cycle, "POLICY", policy)
    monkeypatch.setattr(estimates, "POLICY", policy)
    sweep_runtime = next(h.max_runtime_seconds for h in HABITS if h.name == "coco-pretrain")
    a100 = Allocation.objects.filter(request__flavor__slug="a100-80g").select_related("request")
    reserved_at: datetime | None = None
    promised: datetime | None = None
    shown: tuple[datetime | None, ...] = ()
    reason = ""
    lent_while_reserved: list[str] = []
    sweeps_ends: list[datetime] = []
    for _ in range(40):  # ten minutes
        clock.now += timedelta(seconds=STEP_SECONDS)
        for step in (traffic_step, run_scheduling_cycle, sync_workloads, enforce_reclaim_policies):
            with django_capture_on_commit_callbacks(execute=True):
                step()
        record_utilisation()
        estimates.refresh_start_estimates(now=clock.now.timestamp())  # what its page shows
        head = GpuRequest.objects.filter(name="segformer-train").order_by("pk").first()
        if head is None or head.status != RequestStatus.QUEUED:
            continue
        if promised is None and head.reserved_start_at is not None:
            reserved_at, promised, reason = clock.now, head.reserved_start_at, head.waiting_reason
            assert head.waiting_code == "reserved"
            shown = (head.estimate_low_at, head.estimated_start_at, head.estimate_high_at)
            live = a100.filter(ended_at__isnull=True, is_borrowed=True)
            lent_while_reserved = sorted(a.request.name for a in live)
            sweeps_ends = [
                a.started_at + timedelta(seconds=sweep_runtime)
                for a in live
                if a.request.name == "coco-pretrain" and a.started_at is not None
            ]
        elif promised is not None:
            # The reservation is kept: its start never slides.
            assert head.reserved_start_at == promised

    head = GpuRequest.objects.filter(name="segformer-train").order_by("pk").first()
    assert head is not None and reserved_at is not None and promised is not None
    assert head.queued_at is not None and head.started_at is not None
    # It waited for a whole node for exactly the demo's reservation wait, then was promised the
    # end of the first sweep's declared runtime.
    assert reserved_at - head.queued_at == timedelta(seconds=wait)
    assert f"for request {head.pk}: starts by" in reason
    assert promised == datetime.fromtimestamp(round(min(sweeps_ends).timestamp()), tz=UTC)
    # Meanwhile idle A100s were lent: both sweeps ran on borrowed cards.
    assert Counter(lent_while_reserved)["coco-pretrain"] == 2, lent_while_reserved
    # Smaller work ran beside it while it was reserved, but only where it did not delay it:
    # what started after the reservation on its cards ended before the reserved start.
    mine = a100.get(request=head)
    cards = {(c["node"], c["device_index"]) for c in mine.claims}
    beside = (
        a100.filter(admitted_at__lt=mine.admitted_at)
        .filter(Q(ended_at__isnull=True) | Q(ended_at__gt=reserved_at))
        .exclude(request__name__in=["coco-pretrain", "segformer-train"])
    )
    assert {a.request.name for a in beside} == {"detr-finetune"}
    for other in beside:
        elsewhere = not cards & {(c["node"], c["device_index"]) for c in other.claims}
        assert elsewhere or (other.ended_at is not None and other.ended_at <= promised)
    # It started by the reservation's start, within the estimate its page showed when it was
    # reserved (which ended by the reservation's start too).
    assert head.started_at <= promised
    low, estimated, high = shown
    assert low is not None and estimated is not None and high is not None
    assert low <= estimated <= high <= promised
    assert low <= head.started_at <= high


def test_traffic_is_off_unless_asked_for(settings: Any) -> None:
    settings.DEMO_TRAFFIC = False
    call_command("seed_demo", "--history-days", "0")
    assert demo_schedule() == {}
    assert traffic_step() == Counter()
    assert not GpuRequest.objects.exists()


def test_traffic_never_runs_against_a_real_cluster(settings: Any) -> None:
    settings.DEMO_TRAFFIC = True
    settings.CLUSTER_BACKEND = "kubernetes"
    call_command("seed_demo", "--history-days", "0")
    assert traffic_step() == Counter()
    assert not GpuRequest.objects.exists()


def test_make_run_turns_traffic_on_and_demo_traffic_0_turns_it_off(settings: Any) -> None:
    assert demo_environment({}, host="127.0.0.1")["DEMO_TRAFFIC"] == "true"
    assert demo_environment({"DEMO_TRAFFIC": "0"}, host="127.0.0.1")["DEMO_TRAFFIC"] == "0"
    settings.DEMO_TRAFFIC = True
    app.loader.import_default_modules()
    entries = demo_schedule()
    assert [entry["task"] for entry in entries.values()] == ["portal.tasks.demo_traffic_step"]
    assert "portal.tasks.demo_traffic_step" in app.tasks


def _visitor_submits(*, notebooks: int, a100_jobs: int) -> list[GpuRequest]:
    """What a visitor signed in as alice tries first: L4 notebooks from Vision's "PyTorch
    notebook" template and whole-card A100 training jobs (which wait for bob)."""
    alice = get_user_model().objects.get(username="alice")
    detection = Project.objects.get(team__slug="vision", slug="detection")
    work = [("l4-12g", "notebook", "jupyter/pytorch-notebook:2024-10-07", None)] * notebooks + [
        ("a100-80g", "job", "pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime", ["python", "x.py"])
    ] * a100_jobs
    return [
        submit_gpu_request(
            actor=alice,
            spec=GpuRequestSpec(
                project=detection,
                flavor=Flavor.objects.get(slug=flavor),
                gpu_count=1,
                image=image,
                command=command,
                max_runtime_seconds=4 * 3600,
                kind=kind,
                name=f"my-{kind}-{number}",
            ),
        )
        for number, (flavor, kind, image, command) in enumerate(work)
    ]


def _events(action: str, habit: str) -> int:
    """Audit events `action` about the requests of one habit."""
    mine = GpuRequest.objects.filter(name=habit).values_list("pk", flat=True)
    return AuditEvent.objects.filter(action=action, target_id__in=[str(pk) for pk in mine]).count()


@pytest.mark.parametrize(("notebooks", "at_step"), [(2, 0), (3, 0), (4, 0), (3, 6)])
def test_the_five_minute_stories_still_show_beside_a_visitors_own_work(
    demo: None,
    clock: Clock,
    notebooks: int,
    at_step: int,
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    # The visitor holds L4 shares in Vision's guarantee (which left no room for a fourth
    # four-share fleet and one share for detector-eval without a preemption) and two of its
    # four guaranteed A100s: before the demo's people start, or 90 s in, while dan has yet to
    # approve carol's borrowed fleets.
    mine: list[GpuRequest] = []
    for step_number in range(20):  # five minutes
        if step_number == at_step:
            with django_capture_on_commit_callbacks(execute=True):
                mine = _visitor_submits(notebooks=notebooks, a100_jobs=2)
        clock.now += timedelta(seconds=STEP_SECONDS)
        for step in (traffic_step, run_scheduling_cycle, sync_workloads, enforce_reclaim_policies):
            with django_capture_on_commit_callbacks(execute=True):
                step()
        record_utilisation()
    # The preemption: detector-eval took Vision's guarantee back from a borrowed fleet.
    preempted = GpuRequest.objects.filter(name="asr-serving", preempted_by__name="detector-eval")
    assert preempted.count() == 1
    detector_eval = GpuRequest.objects.get(name="detector-eval")
    assert detector_eval.status == RequestStatus.RUNNING
    assert not Allocation.objects.get(request=detector_eval).is_borrowed
    # Idle warning and reclaim, timeout, rejection: the habits' own, not the visitor's.
    assert _events("reclaim.idle_warning", "explore-coco") == 1
    assert _events("reclaim.idle", "explore-coco") == 1
    assert _events("reclaim.timeout", "quick-check") == 1
    assert _events("request.rejected", "whisper-finetune") >= 1
    # Approval and lending: bob approved the visitor's jobs and detr-finetune; past Vision's
    # guarantee alice's sweeps run on lent A100s (the second may wait for five cards on one
    # node while the visitor's jobs hold some).
    bob = get_user_model().objects.get(username="bob")
    approved = AuditEvent.objects.filter(action="request.approved", actor=bob)
    jobs = [request.pk for request in mine if request.flavor.slug == "a100-80g"]
    assert {str(pk) for pk in jobs} <= set(approved.values_list("target_id", flat=True))
    assert _events("request.approved", "detr-finetune") == 1
    lent = Allocation.objects.filter(request__name__in=["detr-finetune", "coco-pretrain"])
    assert set(lent.values_list("request__name", "is_borrowed")) == {
        ("coco-pretrain", True),
        ("detr-finetune", False),
    }
