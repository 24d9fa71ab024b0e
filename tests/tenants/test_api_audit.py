from __future__ import annotations

import pytest
from django.urls import reverse

from tenants.models import AuditEvent
from tenants.services.organisation import create_project
from tests.support.api_contract import ApiContract, World
from tests.support.cross_tenant import result_ids
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db


def a_project_created_in_team_a(world: World) -> AuditEvent:
    org = world.org
    create_project(actor=org.lead_a, team=org.team_a, name="Audited A", slug="audited-a")
    return AuditEvent.objects.get(team=org.team_a, action="project.created")


AUDIT = ApiContract(
    basename="audit-event",
    subject=a_project_created_in_team_a,
    may_read={"admin", "lead_a"},
    list_refused={"dev_a", "dev_b", "finance", "nobody"},
    list_filters=lambda world: [{"team": world.org.team_a.pk}, {"action": "project"}],
)
test_audit_api_contract = AUDIT.tests()


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


@pytest.mark.parametrize(
    ("since", "found"),
    [
        ("1156-05-14T10:58:59-17:50", True),  # an offset PostgreSQL itself refuses
        ("2999-01-01T00:00:00+23:59", False),
    ],
)
def test_since_takes_any_offset_python_accepts(
    org: Org, events: tuple[AuditEvent, ...], since: str, found: bool
) -> None:
    response = api_client(org.admin).get(reverse("audit-event-list"), {"since": since})
    assert response.status_code == 200
    assert (events[0].pk in result_ids(response)) is found


def test_since_out_of_calendar_range_is_400(org: Org) -> None:
    response = api_client(org.admin).get(
        reverse("audit-event-list"), {"since": "0001-01-01T00:00:00+05:00"}
    )
    assert response.status_code == 400
    assert "since" in response.json()["error"]["fields"]
