"""A gang whose node is lost is stopped whole: every rank goes, and the request is requeued."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from runtime.cluster.simulated import SimulatedCluster
from runtime.models import SimulatedWorkload
from runtime.services.reclaim import enforce_reclaim_policies
from scheduling.choices import RequestStatus
from scheduling.models import Allocation, Node
from scheduling.services.quotas import set_quota
from tests.governance.conftest import Runner
from tests.scheduling.conftest import Fleet
from tests.support.personas import Org

pytestmark = pytest.mark.django_db


def test_a_lost_node_of_a_gang_stops_every_rank_and_requeues_it_with_its_age(
    running: Runner, org: Org, fleet: Fleet, django_capture_on_commit_callbacks: Any
) -> None:
    set_quota(actor=org.admin, team=org.team_a, flavor=fleet.a100, guaranteed=16, limit=32)
    request = running(minutes_ago=5, flavor=fleet.a100, gpu_count=16, max_runtime_seconds=3600)
    allocation = Allocation.objects.get(request=request)
    nodes = allocation.node_name.split(",")
    assert len(nodes) == 2
    assert sorted(SimulatedWorkload.objects.values_list("node_name", flat=True)) == sorted(nodes)
    submitted = request.created_at

    Node.objects.filter(name=nodes[1]).update(is_schedulable=False)
    backend = SimulatedCluster(speed=1.0)
    enforce_reclaim_policies(now=timezone.now(), backend=backend)  # notes when it went away
    with django_capture_on_commit_callbacks(execute=True):
        outcome = enforce_reclaim_policies(
            now=timezone.now() + timedelta(seconds=301), backend=backend
        )
    assert outcome == {"node_lost_requeued": 1}
    request.refresh_from_db()
    assert request.status == RequestStatus.QUEUED
    assert request.created_at == submitted
    assert not Allocation.objects.active().filter(request=request).exists()
    assert not SimulatedWorkload.objects.exists(), "the rank on the healthy node went too"
