"""The audit page filters by actor, object and date, and links the objects it names."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from tenants.models import AuditEvent
from tenants.selectors import filter_audit_events
from tenants.services.organisation import create_project, record_audit_event
from tests.support.personas import Org

pytestmark = pytest.mark.django_db


def test_filters_by_actor_object_and_date(org: Org) -> None:
    project = create_project(actor=org.lead_a, team=org.team_a, name="Filtered", slug="filtered")
    record_audit_event(actor=None, action="budget.alert_80", target=project, team=org.team_a)
    events = AuditEvent.objects.all()
    today = timezone.localdate()

    assert {e.actor_id for e in filter_audit_events(events, actor="lead_a")} == {org.lead_a.pk}
    assert all(e.actor_id is None for e in filter_audit_events(events, actor="system"))
    by_object = filter_audit_events(events, target_type="Project", target_id=str(project.pk))
    assert by_object.count() == 2
    assert filter_audit_events(events, since=today.isoformat()).count() == events.count()
    yesterday = (today - timedelta(days=1)).isoformat()
    assert not filter_audit_events(events, until=yesterday).exists()
    assert filter_audit_events(events, since="2026-13-45").count() == events.count()


def test_the_page_links_a_requests_events_to_the_request(org: Org) -> None:
    AuditEvent.objects.create(
        actor=org.dev_a,
        action="request.asked_extension",
        target_type="GpuRequest",
        target_id="42",
        team=org.team_a,
    )
    client = Client()
    client.force_login(org.lead_a)

    page = client.get(reverse("audit-page"), {"actor": "dev_a"}).content.decode()
    assert f'href="{reverse("gpu-request-page", kwargs={"pk": 42})}"' in page
    assert "Request: asked extension" in page
    assert "No events match" in client.get(reverse("audit-page"), {"actor": "x"}).content.decode()


def test_platform_admins_get_the_settings_page_of_a_project_and_leads_do_not(org: Org) -> None:
    project = create_project(actor=org.lead_a, team=org.team_a, name="Linked", slug="linked")
    url = reverse("manage-projects-edit", kwargs={"pk": project.pk})
    admin, lead = Client(), Client()
    admin.force_login(org.admin)
    lead.force_login(org.lead_a)
    query = {"target_type": "Project", "target_id": str(project.pk)}

    assert f'href="{url}"' in admin.get(reverse("audit-page"), query).content.decode()
    assert f'href="{url}"' not in lead.get(reverse("audit-page"), query).content.decode()
