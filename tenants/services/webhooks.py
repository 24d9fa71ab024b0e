"""Webhooks: platform admins register them; every notice goes to each active one, in the
payload its receiver expects (plain JSON, a Slack incoming webhook, a Microsoft Teams workflow).
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from django.db import transaction

from tenants.choices import WebhookFormat
from tenants.models import Webhook
from tenants.scope import Actor
from tenants.services.organisation import (
    apply_changes,
    known_fields,
    record_audit_event,
    require_platform_admin,
    save_valid,
)
from tenants.validators import public_address_of, validate_webhook_url

WEBHOOK_FIELDS = frozenset({"name", "url", "payload_format", "is_active"})
TIMEOUT_SECONDS = 10
# Adaptive Card 1.4: what Teams renders on every client.
ADAPTIVE_CARD_VERSION = "1.4"


def _audit_data(webhook: Webhook) -> dict[str, Any]:
    """What the audit trail keeps of a webhook: never its URL, which is a credential."""
    return {
        "name": webhook.name,
        "host": urlsplit(webhook.url).hostname or "",
        "payload_format": webhook.payload_format,
        "is_active": webhook.is_active,
    }


@transaction.atomic
def create_webhook(*, actor: Actor, **fields: Any) -> Webhook:
    require_platform_admin(actor, "register webhooks")
    webhook = Webhook(**known_fields(fields, WEBHOOK_FIELDS))
    save_valid(webhook)
    record_audit_event(
        actor=actor,
        action="webhook.created",
        target=webhook,
        message=f"Webhook {webhook.name} ({webhook.get_payload_format_display()}) registered.",
        data=_audit_data(webhook),
    )
    return webhook


@transaction.atomic
def update_webhook(*, actor: Actor, webhook: Webhook, **fields: Any) -> Webhook:
    require_platform_admin(actor, "change webhooks")
    changed = apply_changes(webhook, known_fields(fields, WEBHOOK_FIELDS))
    save_valid(webhook)
    if "url" in changed:
        changed["url"] = ["(replaced)", "(replaced)"]
    record_audit_event(
        actor=actor,
        action="webhook.updated",
        target=webhook,
        message=f"Webhook {webhook.name} changed.",
        data={"changes": changed, **_audit_data(webhook)},
    )
    return webhook


@transaction.atomic
def delete_webhook(*, actor: Actor, webhook: Webhook) -> None:
    require_platform_admin(actor, "delete webhooks")
    record_audit_event(
        actor=actor,
        action="webhook.deleted",
        target=webhook,
        message=f"Webhook {webhook.name} deleted.",
        data=_audit_data(webhook),
    )
    webhook.delete()


def webhook_payload(
    *, payload_format: str, subject: str, body: str, link: str, event: dict[str, Any]
) -> dict[str, Any]:
    """The JSON a receiver of `payload_format` expects for one notice (json: the subject, body,
    link and the event's fields as they are)."""
    if payload_format == WebhookFormat.SLACK:
        return _slack_message(subject=subject, body=body, link=link, event_type=event["type"])
    if payload_format == WebhookFormat.TEAMS:
        return _teams_message(subject=subject, body=body, link=link, event_type=event["type"])
    return {"subject": subject, "body": body, "link": link, **event}


def _slack_message(*, subject: str, body: str, link: str, event_type: str) -> dict[str, Any]:
    """A Slack incoming webhook's message: `text` (the fallback notifications show) and Block
    Kit `blocks`: a header, the body, the event type, a button to the portal's page."""
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": subject[:150]}},
        {"type": "section", "text": {"type": "mrkdwn", "text": body[:3000] or subject}},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": f"`{event_type}`"}]},
    ]
    if link:
        button = {
            "type": "button",
            "text": {"type": "plain_text", "text": "Open in GPU Portal"},
            "url": link,
        }
        blocks.append({"type": "actions", "elements": [button]})
    return {"text": f"{subject}\n{body}".strip(), "blocks": blocks}


def _teams_message(*, subject: str, body: str, link: str, event_type: str) -> dict[str, Any]:
    """A message with one Adaptive Card attachment, the shape a Microsoft Teams workflow ("When
    a Teams webhook request is received") posts to a channel."""
    card: dict[str, Any] = {
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "type": "AdaptiveCard",
        "version": ADAPTIVE_CARD_VERSION,
        "body": [
            {
                "type": "TextBlock",
                "text": subject,
                "weight": "Bolder",
                "size": "Medium",
                "wrap": True,
            },
            {"type": "TextBlock", "text": body, "wrap": True},
            {"type": "FactSet", "facts": [{"title": "Event", "value": event_type}]},
        ],
    }
    if link:
        card["actions"] = [{"type": "Action.OpenUrl", "title": "Open in GPU Portal", "url": link}]
    attachment = {
        "contentType": "application/vnd.microsoft.card.adaptive",
        "contentUrl": None,
        "content": card,
    }
    return {"type": "message", "attachments": [attachment]}


def post_webhook(*, url: str, payload: dict[str, Any]) -> int:
    """POST `payload` as JSON; the receiver's status (2xx), or an OSError (HTTPError for 4xx and
    5xx, URLError when unreachable) for the task to retry."""
    request = urllib.request.Request(  # noqa: S310 - a URL a platform admin registered
        url,
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json", "User-Agent": "gpu-portal"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:  # noqa: S310
        return int(response.status)


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """An HTTP connection to an address resolved and checked beforehand."""

    def __init__(self, host: str, port: int | None, *, address: str, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self.pinned_address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self.pinned_address, self.port), self.timeout)


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """An HTTPS connection to an address resolved and checked beforehand; the certificate is
    verified against the URL's host name, as for any connection."""

    def __init__(self, host: str, port: int | None, *, address: str, timeout: float) -> None:
        self.tls_context = ssl.create_default_context()
        super().__init__(host, port, timeout=timeout, context=self.tls_context)
        self.pinned_address = address

    def connect(self) -> None:
        raw = socket.create_connection((self.pinned_address, self.port), self.timeout)
        self.sock = self.tls_context.wrap_socket(raw, server_hostname=self.host)


def post_to_public_address(*, url: str, payload: dict[str, Any], timeout: float) -> int:
    """POST `payload` as JSON to a user's webhook: only to a public address (checked now, on the
    address connected to: `public_address_of`), no redirect followed. The receiver's status;
    UnsafeWebhookAddress, OSError or a non-2xx status as WebhookRefused otherwise."""
    validate_webhook_url(url)
    parts = urlsplit(url)
    host = parts.hostname or ""
    secure = parts.scheme == "https"
    port = parts.port or (443 if secure else 80)
    address = public_address_of(host, port)
    connection_class = _PinnedHTTPSConnection if secure else _PinnedHTTPConnection
    connection = connection_class(host, port, address=address, timeout=timeout)
    target = parts.path or "/"
    if parts.query:
        target = f"{target}?{parts.query}"
    try:
        connection.request(
            "POST",
            target,
            body=json.dumps(payload).encode(),
            headers={"Content-Type": "application/json", "User-Agent": "gpu-portal"},
        )
        response = connection.getresponse()
        response.read(65536)
    finally:
        connection.close()
    if not 200 <= response.status < 300:
        raise WebhookRefused(response.status)
    return int(response.status)


class WebhookRefused(Exception):
    """The receiver answered with a status other than 2xx."""

    def __init__(self, status: int) -> None:
        super().__init__(f"answered HTTP {status}")
        self.status = status
