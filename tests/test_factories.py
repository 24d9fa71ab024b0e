"""The factories build valid rows from nothing, and requests only through the services."""

from __future__ import annotations

import pytest

from scheduling.choices import RequestStatus
from scheduling.models import Allocation
from tenants.choices import Role
from tenants.models import AuditEvent
from tests.support.factories import GpuRequestFactory, MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db


def test_a_request_from_nothing_is_submitted_and_queued_by_the_tiers_rule() -> None:
    request = GpuRequestFactory.create()
    assert request.status == RequestStatus.QUEUED
    events = AuditEvent.objects.filter(target_id=str(request.pk)).order_by("id")
    actions = list(events.values_list("action", flat=True))
    assert actions == ["request.submitted", "request.approved", "request.queued"]


@pytest.mark.parametrize(
    ("to", "status"),
    [
        ("queued", RequestStatus.QUEUED),
        ("admitted", RequestStatus.ADMITTED),
        ("launching", RequestStatus.LAUNCHING),
        ("running", RequestStatus.RUNNING),
    ],
)
def test_a_request_is_moved_on_through_the_cycle_and_the_cluster(to: str, status: str) -> None:
    request = GpuRequestFactory.create(priority="high", to=to)  # high priority: a lead approves
    assert request.status == status
    assert request.approved_by is not None
    if to != "queued":
        (allocation,) = Allocation.objects.filter(request=request)
        assert (allocation.started_at is not None) == (to == "running")


def test_users_get_the_role_they_are_made_with() -> None:
    lead = MembershipFactory.create(lead=True)
    admin = UserFactory.create(role=Role.PLATFORM_ADMIN)
    assert (lead.role, lead.team is not None) == (Role.TEAM_LEAD, True)
    assert admin.memberships.get().team is None
    assert admin.check_password(f"pw-{admin.username}")
