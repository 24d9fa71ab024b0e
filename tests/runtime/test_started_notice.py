"""A request whose workload starts running tells its owner "started": in the inbox by default,
not by email unless they chose it, and on their webhook's topics like any other notice."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core import mail
from django.utils import timezone

from runtime.cluster.simulated import SimulatedCluster
from runtime.models import SimulatedWorkload
from runtime.services import execution
from scheduling.choices import RequestStatus
from scheduling.models import GpuRequest
from scheduling.services import cycle
from tenants.choices import NotificationTopic
from tenants.models import Notification
from tenants.services.notification_settings import update_notification_settings
from tests.scheduling.conftest import Fleet
from tests.support.factories import GpuRequestFactory
from tests.support.personas import Org

pytestmark = pytest.mark.django_db
CLUSTER = SimulatedCluster(speed=1)


def launch_and_start(org: Org, fleet: Fleet, capture: Any) -> GpuRequest:
    """dev_a's job is admitted and launched; its pod is then running (and far from done)."""
    request = GpuRequestFactory.create(project=org.project_a, flavor=fleet.l4_12g, kind="job")
    admitted: list[tuple[int, int]] = []
    with capture(execute=True):
        cycle.run_cycle(on_admit=lambda r, a: admitted.append((r, a)))
    for request_id, attempt in admitted:
        execution.launch_request(request_id=request_id, attempt=attempt, backend=CLUSTER)
    now = timezone.now()
    SimulatedWorkload.objects.update(
        starts_at=now - timedelta(seconds=1), ends_at=now + timedelta(hours=1), fails=False
    )
    mail.outbox.clear()
    with capture(execute=True):
        execution.sync_workloads(backend=CLUSTER)
    request.refresh_from_db()
    assert request.status == RequestStatus.RUNNING
    return request


def test_a_started_request_tells_its_owner_in_the_inbox_only_by_default(
    org: Org, fleet: Fleet, django_capture_on_commit_callbacks: Any
) -> None:
    request = launch_and_start(org, fleet, django_capture_on_commit_callbacks)

    started = Notification.objects.get(recipient=org.dev_a, event_type="request.running")
    assert started.subject == f"GPU request {request.label} started"
    assert mail.outbox == []


def test_an_owner_who_wants_starts_by_email_gets_one(
    org: Org, fleet: Fleet, django_capture_on_commit_callbacks: Any
) -> None:
    update_notification_settings(actor=org.dev_a, email_topics=[NotificationTopic.STARTED])

    request = launch_and_start(org, fleet, django_capture_on_commit_callbacks)

    assert [(m.to, m.subject) for m in mail.outbox] == [
        (["dev_a@example.com"], f"GPU request {request.label} started")
    ]
