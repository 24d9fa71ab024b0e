"""Notices really go out: email to a real SMTP server (aiosmtpd on loopback), and one message
per webhook to a real HTTP receiver, in each webhook's format (Slack, Microsoft Teams, JSON).

The notice is a lead's approval, which tells the owner (scheduling.services.notifications);
the tasks run inline (tests/conftest.py), so each message crosses a real socket."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.urls import reverse

from scheduling.models import GpuRequest
from scheduling.services.requests import approve_gpu_request
from tenants.choices import WebhookFormat
from tenants.models import Webhook
from tests.scheduling.conftest import Fleet
from tests.scheduling.helpers import request_body
from tests.support.factories import api_submit
from tests.support.personas import Org, api_client
from tests.support.receivers import (
    SmtpServer,
    WebhookReceiver,
    run_smtp_server,
    run_webhook_receiver,
)

pytestmark = pytest.mark.django_db

PORTAL_URL = "https://gpu.example.com"


@pytest.fixture
def smtp_server() -> Iterator[SmtpServer]:
    yield from run_smtp_server()


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    yield from run_webhook_receiver()


def approve_a_pending_request(org: Org, fleet: Fleet, capture_on_commit: Any) -> GpuRequest:
    """dev_a asks for a whole A100 (it waits for the lead); lead_a approves it."""
    with capture_on_commit(execute=True):
        body = api_submit(org.dev_a, request_body(org.project_a, fleet.a100)).json()
    assert body["status"] == "pending_approval"
    request = GpuRequest.objects.get(pk=body["id"])
    with capture_on_commit(execute=True):
        approve_gpu_request(actor=org.lead_a, request=request, comment="go ahead")
    return request


def test_an_approval_is_emailed_to_the_owner_through_the_smtp_server(
    org: Org,
    fleet: Fleet,
    smtp_server: SmtpServer,
    settings: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST = smtp_server.host
    settings.EMAIL_PORT = smtp_server.port
    settings.DEFAULT_FROM_EMAIL = "GPU Portal <gpu-portal@example.com>"

    request = approve_a_pending_request(org, fleet, django_capture_on_commit_callbacks)

    # The submission told the lead; the approval tells the owner.
    by_recipient = {tuple(mail.recipients): mail for mail in smtp_server.received}
    assert set(by_recipient) == {("lead_a@example.com",), ("dev_a@example.com",)}
    mail = by_recipient[("dev_a@example.com",)]
    assert mail.sender == "gpu-portal@example.com"
    assert mail.message["From"] == "GPU Portal <gpu-portal@example.com>"
    assert mail.message["To"] == "dev_a@example.com"
    assert mail.message["Subject"] == f"GPU request {request.pk} approved"
    assert mail.message.get_content().rstrip().endswith("go ahead")  # the lead's comment
    lead_mail = by_recipient[("lead_a@example.com",)]
    assert lead_mail.message["Subject"] == f"GPU request {request.pk} needs your approval"


SEND_THROUGH_EMAIL_URL = (
    "import django; django.setup(); from django.conf import settings; "
    "from django.core.mail import send_mail; "
    "print(settings.EMAIL_BACKEND, settings.EMAIL_HOST, settings.EMAIL_PORT); "
    "send_mail('Quota raised', 'Team A may use 8 more GPUs.', None, ['lead_a@example.com'])"
)


def test_email_url_points_the_portal_at_the_smtp_server(smtp_server: SmtpServer) -> None:
    """EMAIL_URL alone (as the Helm chart's Secret sets it) sends through SMTP, not the log."""
    environment = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "EMAIL_URL": f"smtp://{smtp_server.host}:{smtp_server.port}",
        "DEFAULT_FROM_EMAIL": "portal@example.com",
    }
    environment.pop("EMAIL_BACKEND", None)
    done = subprocess.run(  # noqa: S603
        [sys.executable, "-c", SEND_THROUGH_EMAIL_URL],
        cwd=django_settings.BASE_DIR,
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split() == [
        "django.core.mail.backends.smtp.EmailBackend",
        smtp_server.host,
        str(smtp_server.port),
    ]
    [mail] = smtp_server.received
    assert mail.sender == "portal@example.com"
    assert mail.recipients == ["lead_a@example.com"]
    assert mail.message["Subject"] == "Quota raised"
    assert mail.message.get_content().strip() == "Team A may use 8 more GPUs."


def register(org: Org, name: str, url: str, payload_format: str) -> dict[str, Any]:
    response = api_client(org.admin).post(
        reverse("webhook-list"),
        {"name": name, "url": url, "payload_format": payload_format},
        format="json",
    )
    assert response.status_code == 201, response.content
    return dict(response.json())


def test_each_webhook_hears_the_notice_in_its_own_format(
    org: Org,
    fleet: Fleet,
    receiver: WebhookReceiver,
    settings: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    settings.PORTAL_URL = PORTAL_URL
    register(org, "Slack #gpu", f"{receiver.url}/slack/T000/B000/secret", WebhookFormat.SLACK)
    register(org, "Teams GPU channel", f"{receiver.url}/teams/workflow", WebhookFormat.TEAMS)
    register(org, "Audit sink", f"{receiver.url}/json", WebhookFormat.JSON)
    paused = register(org, "Paused", f"{receiver.url}/paused", WebhookFormat.JSON)
    Webhook.objects.filter(pk=paused["id"]).update(is_active=False)

    request = approve_a_pending_request(org, fleet, django_capture_on_commit_callbacks)
    link = f"{PORTAL_URL}{reverse('gpu-request-page', kwargs={'pk': request.pk})}"

    approved = [call for call in receiver.calls if "approved" in json.dumps(call.body).lower()]
    assert sorted(call.path for call in approved) == [
        "/json",
        "/slack/T000/B000/secret",
        "/teams/workflow",
    ]
    assert not [call for call in receiver.calls if call.path == "/paused"]
    calls = {call.path.split("/")[1]: call for call in approved}
    for call in calls.values():
        assert call.headers["Content-Type"] == "application/json"

    # Slack incoming webhook: the fallback text and Block Kit blocks.
    slack = calls["slack"].body
    subject = slack["blocks"][0]["text"]["text"]
    assert subject == f"GPU request {request.pk} approved"
    assert slack["blocks"][1]["text"]["text"].endswith("go ahead")
    assert slack["text"].startswith(subject)
    assert [block["type"] for block in slack["blocks"]] == [
        "header",
        "section",
        "context",
        "actions",
    ]
    assert slack["blocks"][0]["text"]["type"] == "plain_text"
    assert slack["blocks"][1]["text"]["type"] == "mrkdwn"
    assert slack["blocks"][2]["elements"] == [{"type": "mrkdwn", "text": "`request.approved`"}]
    [button] = slack["blocks"][3]["elements"]
    assert button == {
        "type": "button",
        "text": {"type": "plain_text", "text": "Open in GPU Portal"},
        "url": link,
    }

    # Microsoft Teams workflow: a message with one Adaptive Card.
    teams = calls["teams"].body
    assert teams["type"] == "message"
    [attachment] = teams["attachments"]
    assert attachment["contentType"] == "application/vnd.microsoft.card.adaptive"
    assert attachment["contentUrl"] is None
    card = attachment["content"]
    assert card["type"] == "AdaptiveCard"
    assert card["version"] == "1.4"
    assert card["$schema"] == "http://adaptivecards.io/schemas/adaptive-card.json"
    title, text, facts = card["body"]
    assert title == {
        "type": "TextBlock",
        "text": subject,
        "weight": "Bolder",
        "size": "Medium",
        "wrap": True,
    }
    assert text["type"] == "TextBlock" and text["wrap"] is True
    assert text["text"] == slack["blocks"][1]["text"]["text"]
    assert facts == {"type": "FactSet", "facts": [{"title": "Event", "value": "request.approved"}]}
    assert card["actions"] == [
        {"type": "Action.OpenUrl", "title": "Open in GPU Portal", "url": link}
    ]

    # Plain JSON: the event as it is, with the subject, body and link.
    plain = calls["json"].body
    assert plain == {
        "subject": subject,
        "body": text["text"],
        "link": link,
        "type": "request.approved",
        "request": request.pk,
    }


def test_the_webhook_of_the_environment_speaks_its_configured_format(
    org: Org,
    fleet: Fleet,
    receiver: WebhookReceiver,
    settings: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    settings.NOTIFICATION_WEBHOOK_URL = f"{receiver.url}/env"
    settings.NOTIFICATION_WEBHOOK_FORMAT = WebhookFormat.TEAMS
    approve_a_pending_request(org, fleet, django_capture_on_commit_callbacks)
    # The submission (to the lead) and the approval (to the owner): two notices, two cards.
    assert [call.path for call in receiver.calls] == ["/env", "/env"]
    assert {call.body["type"] for call in receiver.calls} == {"message"}
    # No PORTAL_URL: the card carries no link.
    assert all("actions" not in call.body["attachments"][0]["content"] for call in receiver.calls)
