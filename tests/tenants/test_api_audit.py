from __future__ import annotations

import pytest
from django.urls import reverse

from tenants.models import AuditEvent
from tenants.services import create_project
from tests.support.cross_tenant import assert_other_tenant_hidden, covers, result_ids
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def events(org: Org) -> tuple[AuditEvent, AuditEvent]:
    create_project(actor=org.lead_a, team=org.team_a, name="Audited A", slug="audited-a")
    create_project(actor=org.lead_b, team=org.team_b, name="Audited B", slug="audited-b")
    return (
        AuditEvent.objects.get(team=org.team_a, action="project.created"),
        AuditEvent.objects.get(team=org.team_b, action="project.created"),
    )


def test_admin_reads_all_and_lead_reads_own_team(org: Org, events: tuple[AuditEvent, ...]) -> None:
    event_a, event_b = events
    assert {event_a.pk, event_b.pk} <= result_ids(
        api_client(org.admin).get(reverse("audit-event-list"))
    )
    assert result_ids(api_client(org.lead_a).get(reverse("audit-event-list"))) == {event_a.pk}


def test_developers_and_finance_are_refused_the_audit_list(
    org: Org, events: tuple[AuditEvent, ...]
) -> None:
    for user in (org.dev_a, org.finance, org.nobody):
        assert api_client(user).get(reverse("audit-event-list")).status_code == 403


@covers("audit-event-detail")
def test_other_team_audit_events_are_404(org: Org, events: tuple[AuditEvent, ...]) -> None:
    assert_other_tenant_hidden(
        api_client(org.lead_a),
        detail_route="audit-event-detail",
        pk=events[1].pk,
        list_route="audit-event-list",
        list_filters=[{"team": org.team_b.pk}, {"action": "project"}],
    )


def test_audit_events_cannot_be_changed(org: Org, events: tuple[AuditEvent, ...]) -> None:
    from django.core.exceptions import ValidationError

    event = events[0]
    url = reverse("audit-event-detail", kwargs={"pk": event.pk})
    assert api_client(org.admin).delete(url).status_code == 405
    event.message = "rewritten"
    with pytest.raises(ValidationError):
        event.save()
    with pytest.raises(ValidationError):
        event.delete()


def test_bad_since_filter_is_400(org: Org, events: tuple[AuditEvent, ...]) -> None:
    response = api_client(org.admin).get(reverse("audit-event-list"), {"since": "yesterday"})
    assert response.status_code == 400


def test_anonymous_cannot_read_audit(org: Org) -> None:
    assert api_client(None).get(reverse("audit-event-list")).status_code == 401
