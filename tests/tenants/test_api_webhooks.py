"""/api/v1/webhooks/: platform admins register webhooks with a payload format; no one else
sees them, and the URL (a credential for Slack and Teams) goes in but never comes out."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tenants.choices import WebhookFormat
from tenants.models import AuditEvent, Webhook
from tests.support.api_contract import ApiContract
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db

SECRET_URL = "https://hooks.slack.com/services/T000/B000/very-secret-token"
LIST = reverse("webhook-list")

WEBHOOKS = ApiContract(
    basename="webhook",
    subject=lambda world: Webhook.objects.create(
        name="Slack #gpu", url=SECRET_URL, payload_format=WebhookFormat.SLACK
    ),
    may_read={"admin"},
    may_create={"admin"},
    may_update={"admin"},
    may_delete={"admin"},
    create_body={
        "name": "Teams GPU channel",
        "url": "https://example.webhook.office.com/workflows/abc",
        "payload_format": "teams",
    },
    update_body={"is_active": False},
    audit="webhook",
)
test_webhook_api_contract = WEBHOOKS.tests()


def test_the_url_is_in_no_response_and_no_audit_event(org: Org) -> None:
    admin = api_client(org.admin)
    created = admin.post(
        LIST, {"name": "Slack", "url": SECRET_URL, "payload_format": "slack"}, format="json"
    )
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["host"] == "hooks.slack.com"
    assert body["payload_format"] == "slack"
    detail = reverse("webhook-detail", kwargs={"pk": body["id"]})
    replaced = admin.patch(detail, {"url": SECRET_URL + "-2"}, format="json")
    assert replaced.status_code == 200
    for response in (created, replaced, admin.get(LIST), admin.get(detail)):
        assert "very-secret-token" not in response.content.decode()
    events = AuditEvent.objects.filter(action__startswith="webhook.")
    assert [e.action for e in events.order_by("pk")] == ["webhook.created", "webhook.updated"]
    assert all("very-secret-token" not in str(e.data) for e in events)
    assert Webhook.objects.get().url == SECRET_URL + "-2"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "X", "url": SECRET_URL, "payload_format": "discord"}, "payload_format"),
        ({"name": "X", "url": "ftp://hooks.example.com/x", "payload_format": "json"}, "url"),
        ({"name": "X", "url": "not a url", "payload_format": "json"}, "url"),
        ({"name": "X", "payload_format": "json"}, "url"),
    ],
)
def test_a_bad_webhook_is_a_400_naming_the_field(
    org: Org, body: dict[str, str], field: str
) -> None:
    response = api_client(org.admin).post(LIST, body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["fields"], response.json()
    assert not Webhook.objects.exists()


def test_a_second_webhook_with_the_same_name_is_refused(org: Org) -> None:
    admin = api_client(org.admin)
    body = {"name": "Slack", "url": SECRET_URL, "payload_format": "slack"}
    assert admin.post(LIST, body, format="json").status_code == 201
    again = admin.post(LIST, body, format="json")
    assert again.status_code == 400
    assert "name" in again.json()["error"]["fields"]
