"""/manage/webhooks/: a platform admin registers, edits and removes webhooks on a page; bad
input is a form error; the URL is never shown; no one else reaches them."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from tenants.models import AuditEvent, Webhook
from tests.support.personas import Org

pytestmark = pytest.mark.django_db

SECRET_URL = "https://example.webhook.office.com/workflows/abc/triggers/manual?sig=s3cr3t"


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_admin_registers_edits_and_deletes_a_teams_webhook(org: Org) -> None:
    admin = _client(org.admin)
    created = admin.post(
        reverse("manage-webhooks"),
        {"name": "GPU channel", "url": SECRET_URL, "payload_format": "teams", "is_active": "on"},
    )
    assert created.status_code == 302, created.content.decode()
    webhook = Webhook.objects.get()
    assert (webhook.url, webhook.payload_format, webhook.is_active) == (SECRET_URL, "teams", True)
    page = admin.get(reverse("manage-webhooks")).content.decode()
    assert "Microsoft Teams" in page and "example.webhook.office.com" in page
    assert "s3cr3t" not in page

    edit = reverse("manage-webhooks-edit", kwargs={"pk": webhook.pk})
    assert "s3cr3t" not in admin.get(edit).content.decode()
    # An empty URL keeps the stored one; the format changes.
    saved = admin.post(edit, {"name": "GPU channel", "url": "", "payload_format": "slack"})
    assert saved.status_code == 302, saved.content.decode()
    webhook.refresh_from_db()
    assert (webhook.url, webhook.payload_format, webhook.is_active) == (SECRET_URL, "slack", False)

    deleted = admin.post(reverse("manage-webhooks-delete", kwargs={"pk": webhook.pk}))
    assert deleted.status_code == 302
    assert not Webhook.objects.exists()
    actions = list(
        AuditEvent.objects.filter(action__startswith="webhook.").values_list("action", flat=True)
    )
    assert sorted(actions) == ["webhook.created", "webhook.deleted", "webhook.updated"]


@pytest.mark.parametrize(
    ("form", "field"),
    [
        ({"name": "X", "url": SECRET_URL, "payload_format": "discord"}, "payload_format"),
        ({"name": "X", "url": "ftp://hooks.example.com/x", "payload_format": "json"}, "url"),
        ({"name": "X", "url": "", "payload_format": "json"}, "url"),
    ],
)
def test_a_bad_webhook_is_a_form_error(org: Org, form: dict[str, str], field: str) -> None:
    response = _client(org.admin).post(reverse("manage-webhooks"), form)
    assert response.status_code == 400
    assert field in response.context["form"].errors
    assert not Webhook.objects.exists()


def test_no_one_but_a_platform_admin_reaches_a_webhook(org: Org) -> None:
    webhook = Webhook.objects.create(name="Slack", url=SECRET_URL, payload_format="slack")
    for persona in ("lead_a", "dev_a", "finance"):
        client = _client(getattr(org, persona))
        # Admin-only pages are not there for anyone else (404), as every manage page.
        assert client.get(reverse("manage-webhooks")).status_code == 404
        for route in ("manage-webhooks-edit", "manage-webhooks-delete"):
            url = reverse(route, kwargs={"pk": webhook.pk})
            assert client.get(url).status_code == 404, (persona, route)
            assert client.post(url, {"name": "mine"}).status_code == 404
    webhook.refresh_from_db()
    assert webhook.name == "Slack"
