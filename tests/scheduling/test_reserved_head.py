"""The protected head on the demo fleet: a 4 x A100 request that waits for four cards on one node
gets a reservation after SCHEDULING_RESERVATION_WAIT_SECONDS, keeps it while smaller work
backfills around it, and starts by its reservation, within the estimate shown on its page.

The test plays the cluster and the clock: one `run_cycle(now=...)` a minute, admitted work
starts at its tick and ends after its max runtime (as test_replay.py does).
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from scheduling.choices import RequestStatus
from scheduling.models import Allocation, Flavor, GpuRequest, Tier
from scheduling.services import cycle, estimates
from scheduling.services.quotas import set_quota
from tenants.models import Project
from tests.scheduling.conftest import Fleet
from tests.support.factories import GpuRequestFactory
from tests.support.personas import Org

pytestmark = pytest.mark.django_db

TICK = 60
HOUR = 3600


class Cluster:
    """Queued requests submitted at the simulated time; admitted ones run their max runtime."""

    def __init__(self, flavor: Flavor, start: datetime) -> None:
        self.flavor = flavor
        self.now = start
        self.running: dict[int, datetime] = {}  # request → when it ends
        self.started: dict[int, datetime] = {}

    def submit(self, project: Project, gpu_count: int, runtime: int) -> GpuRequest:
        request: GpuRequest = GpuRequestFactory.create(
            project=project,
            flavor=self.flavor,
            gpu_count=gpu_count,
            max_runtime_seconds=runtime,
            to="queued",
        )
        GpuRequest.objects.filter(pk=request.pk).update(created_at=self.now, queued_at=self.now)
        return request

    def tick(self) -> None:
        """End the work due by now, run one cycle at now, start what it admitted."""
        for pk, ends in list(self.running.items()):
            if ends <= self.now:
                Allocation.objects.filter(request_id=pk, ended_at__isnull=True).update(
                    ended_at=ends, end_reason="succeeded"
                )
                GpuRequest.objects.filter(pk=pk).update(
                    status=RequestStatus.SUCCEEDED, finished_at=ends
                )
                del self.running[pk]
        result = cycle.run_cycle(now=self.now.timestamp())
        for pk in result.admitted:
            Allocation.objects.filter(request_id=pk, ended_at__isnull=True).update(
                started_at=self.now
            )
            GpuRequest.objects.filter(pk=pk).update(started_at=self.now)
            runtime = GpuRequest.objects.get(pk=pk).max_runtime_seconds
            self.running[pk] = self.now + timedelta(seconds=runtime)
            self.started[pk] = self.now
        self.now += timedelta(seconds=TICK)


def test_a_4_card_head_is_reserved_and_starts_within_its_estimate_while_small_work_backfills(
    org: Org, fleet: Fleet
) -> None:
    # Team B may use the A100s too, within its guarantee (so nothing it runs is borrowed or
    # preemptible); team A has room for its 4 cards.
    Tier.objects.get(slug="training").allowed_teams.add(org.team_b)
    for team, guaranteed in ((org.team_a, 4), (org.team_b, 16)):
        set_quota(actor=org.admin, team=team, flavor=fleet.a100, guaranteed=guaranteed, limit=64)
    start = (timezone.now() - timedelta(days=1)).replace(second=0, microsecond=0)
    cluster = Cluster(fleet.a100, start)

    # Two long jobs leave 2 and 3 cards free on the two 8-card nodes: no node has 4.
    six = cluster.submit(org.project_b, 6, HOUR)
    five = cluster.submit(org.project_b, 5, 2 * HOUR)
    cluster.tick()
    assert {six.pk, five.pk} <= cluster.started.keys()

    head = cluster.submit(org.project_a, 4, HOUR)
    queued_at = cluster.now
    cluster.tick()
    head.refresh_from_db()
    assert head.status == RequestStatus.QUEUED and head.waiting_code == "capacity"
    assert "capacity is reserved for it from" in head.waiting_reason
    assert head.reserved_start_at is None

    # Smaller work submitted after it starts first, on the free cards, before and after the
    # reservation is made: 1-card jobs of 20 minutes, one a minute.
    small: list[GpuRequest] = []
    promised: datetime | None = None
    window: tuple[datetime, datetime] | None = None
    behind: GpuRequest | None = None
    while head.pk not in cluster.started and cluster.now < start + timedelta(hours=2):
        small.append(cluster.submit(org.project_b, 1, 20 * 60))
        cluster.tick()
        head.refresh_from_db()
        if promised is None and head.reserved_start_at is not None:
            # Reserved once it waited SCHEDULING_RESERVATION_WAIT_SECONDS, no earlier.
            waited = (cluster.now - timedelta(seconds=TICK) - queued_at).total_seconds()
            assert waited >= settings.SCHEDULING_RESERVATION_WAIT_SECONDS
            assert waited < settings.SCHEDULING_RESERVATION_WAIT_SECONDS + 2 * TICK
            assert head.waiting_code == "reserved"
            assert f"for request {head.pk}: starts by" in head.waiting_reason
            assert "smaller work runs on these cards only where it ends before" in (
                head.waiting_reason
            )
            promised = head.reserved_start_at
            estimates.refresh_start_estimates(
                now=(cluster.now - timedelta(seconds=TICK)).timestamp()
            )
            head.refresh_from_db()
            assert head.estimate_low_at is not None and head.estimate_high_at is not None
            window = (head.estimate_low_at, head.estimate_high_at)
            # Long work that could only run on the reserved cards waits behind the head.
            behind = cluster.submit(org.project_b, 2, 3 * HOUR)
        elif promised is not None and head.status == RequestStatus.QUEUED:
            # The reservation is kept: its start never slides.
            assert head.reserved_start_at is not None and head.reserved_start_at <= promised

    assert promised is not None and window is not None and behind is not None
    assert head.pk in cluster.started, "the head never started"
    began = cluster.started[head.pk]
    assert began < promised + timedelta(seconds=TICK)
    assert window[0] - timedelta(seconds=TICK) <= began <= window[1] + timedelta(seconds=TICK)
    # Smaller work submitted after the head started before it: backfilling.
    overtook = [r.pk for r in small if cluster.started.get(r.pk, began) < began]
    assert len(overtook) >= 5
    behind.refresh_from_db()
    assert behind.pk not in cluster.started or cluster.started[behind.pk] >= began
