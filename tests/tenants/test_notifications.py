"""The in-app inbox: who is told what, where it links, mark-read, the API and the page."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounting.models import Budget
from accounting.services.budgets import check_budget_burn
from accounting.services.metering import meter_usage
from scheduling.choices import RequestStatus
from scheduling.services.notifications import notify
from scheduling.services.requests import approve_gpu_request
from tenants.choices import NotificationKind
from tenants.models import Notification
from tenants.services.notifications import mark_notifications_read, unread_notification_count
from tests.accounting.factories import make_allocation, make_request, set_price
from tests.support.api_contract import ApiContract, World
from tests.support.cross_tenant import covers
from tests.support.factories import GpuRequestFactory
from tests.support.fleet import make_fleet
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db


def a_notification_of_dev_a(world: World) -> Notification:
    notify(
        users=[world.org.dev_a],
        subject="GPU request 1 rejected",
        body="Too big.",
        event={"type": "request.rejected", "request": 1},
    )
    return Notification.objects.get(recipient=world.org.dev_a)


NOTIFICATIONS = ApiContract(
    basename="notification",
    subject=a_notification_of_dev_a,
    may_read={"dev_a"},
    list_filters=lambda world: [{"unread": "true"}, {"kind": "approval"}],
    actions=("read",),
)
test_notification_api_contract = NOTIFICATIONS.tests()


def test_a_request_waiting_for_approval_tells_the_lead_and_the_answer_tells_the_owner(
    org: Org,
) -> None:
    fleet = make_fleet(org)
    request = GpuRequestFactory.create(project=org.project_a, actor=org.dev_a, flavor=fleet.a100)
    assert request.status == RequestStatus.PENDING_APPROVAL

    asked = Notification.objects.get(recipient=org.lead_a)
    assert asked.kind == NotificationKind.APPROVAL
    assert asked.url == reverse("approvals-page") + f"#inbox-approval-{request.pk}"
    assert not Notification.objects.filter(recipient__in=[org.lead_b, org.dev_b]).exists()

    approve_gpu_request(actor=org.lead_a, request=request)
    answer = Notification.objects.get(recipient=org.dev_a)
    assert (answer.kind, answer.event_type) == (NotificationKind.APPROVAL, "request.approved")
    assert answer.url == reverse("gpu-request-page", kwargs={"pk": request.pk})


def test_a_budget_alert_reaches_the_team_leads_inbox(org: Org) -> None:
    fleet = make_fleet(org)
    set_price(fleet.a100, "2.50")
    now = timezone.now()
    make_allocation(
        make_request(project=org.project_a, owner=org.dev_a, flavor=fleet.a100),
        started_at=now - timedelta(hours=2),
    )
    meter_usage(now=now)
    Budget.objects.create(team=org.team_a, unit="money", amount=Decimal("1"))

    assert check_budget_burn(now=now) >= 1
    alerts = Notification.objects.filter(recipient=org.lead_a, kind=NotificationKind.BUDGET)
    assert alerts.exists()
    assert all(alert.url == reverse("budgets-page") for alert in alerts)


def test_marking_read_is_idempotent_and_touches_only_ones_own(org: Org) -> None:
    for user in (org.dev_a, org.dev_a, org.dev_b):
        notify(users=[user], subject="s", body="b", event={"type": "reclaim.idle_warning"})
    assert unread_notification_count(user=org.dev_a) == 2

    assert mark_notifications_read(user=org.dev_a) == 2
    assert mark_notifications_read(user=org.dev_a) == 0
    assert unread_notification_count(user=org.dev_a) == 0
    assert unread_notification_count(user=org.dev_b) == 1


def test_the_api_marks_one_read_and_then_all(org: Org) -> None:
    for _ in range(3):
        notify(users=[org.dev_a], subject="s", body="b", event={"type": "reclaim.timeout_warning"})
    first = Notification.objects.filter(recipient=org.dev_a).first()
    assert first is not None
    client = api_client(org.dev_a)

    response = client.post(reverse("notification-read", kwargs={"pk": first.pk}))
    assert response.status_code == 200
    assert response.json()["is_read"] is True
    assert response.json()["kind_label"] == "Warning"
    unread = client.get(reverse("notification-list"), {"unread": "true"}).json()
    assert unread["count"] == 2

    response = client.post(reverse("notification-read-all"))
    assert response.json() == {"marked_read": 2}
    assert client.get(reverse("notification-list"), {"unread": "true"}).json()["count"] == 0


def test_the_nav_shows_the_unread_count_and_the_page_marks_read(org: Org) -> None:
    notify(
        users=[org.dev_a],
        subject="GPU request 7 is idle and will be reclaimed",
        body="Idle.",
        event={"type": "reclaim.idle_warning", "request": 7},
    )
    client = Client()
    client.force_login(org.dev_a)

    page = client.get(reverse("api-tokens")).content.decode()
    assert 'data-testid="unread-count">1<' in page
    inbox = client.get(reverse("notifications-page")).content.decode()
    assert "is idle and will be reclaimed" in inbox
    assert "Warning" in inbox

    notification = Notification.objects.get(recipient=org.dev_a)
    url = reverse("notification-read-page", kwargs={"pk": notification.pk})
    response = client.post(url, {"open": "1"})
    assert response.status_code == 302
    assert response["Location"] == reverse("gpu-request-page", kwargs={"pk": 7})
    assert unread_notification_count(user=org.dev_a) == 0
    assert 'data-testid="unread-count"' not in client.get(reverse("api-tokens")).content.decode()


@covers("notification-read-page")
def test_another_users_notification_cannot_be_marked_from_the_page(org: Org) -> None:
    notify(users=[org.dev_b], subject="s", body="b", event={"type": "request.expired"})
    notification = Notification.objects.get(recipient=org.dev_b)
    client = Client()
    client.force_login(org.dev_a)
    url = reverse("notification-read-page", kwargs={"pk": notification.pk})
    assert client.post(url).status_code == 404
    assert unread_notification_count(user=org.dev_b) == 1
