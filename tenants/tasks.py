"""Periodic housekeeping of the organisation, and notices sent to webhooks."""

from __future__ import annotations

from typing import Any

from celery import shared_task
from django.conf import settings
from django.utils import timezone
from knox.models import AuthToken

from tenants.selectors import active_webhook
from tenants.services.notification_settings import send_to_personal_webhook
from tenants.services.webhooks import post_webhook, webhook_payload


@shared_task(acks_late=True)
def purge_expired_api_tokens() -> int:
    """Delete API tokens past expiry: knox refuses them already; this keeps the table small."""
    _, by_model = AuthToken.objects.filter(expiry__lt=timezone.now()).delete()
    deleted = by_model.get("knox.AuthToken", 0)
    return deleted


@shared_task(acks_late=True, autoretry_for=(OSError,), retry_backoff=True, max_retries=5)
def send_webhook(
    webhook_id: int | None, subject: str, body: str, link: str, event: dict[str, Any]
) -> int:
    """POST one notice to one webhook (None: the NOTIFICATION_WEBHOOK_URL setting's) in its
    format; retried on a refusal or an unreachable receiver. A webhook deleted or switched off
    meanwhile is skipped (0)."""
    if webhook_id is None:
        url, payload_format = (
            settings.NOTIFICATION_WEBHOOK_URL,
            settings.NOTIFICATION_WEBHOOK_FORMAT,
        )
    else:
        webhook = active_webhook(webhook_id=webhook_id)
        if webhook is None:
            return 0
        url, payload_format = webhook.url, webhook.payload_format
    if not url:
        return 0
    payload = webhook_payload(
        payload_format=payload_format, subject=subject, body=body, link=link, event=event
    )
    return post_webhook(url=url, payload=payload)


@shared_task(acks_late=True, soft_time_limit=30, time_limit=40)
def send_personal_webhook(
    user_id: int, subject: str, body: str, link: str, event: dict[str, Any]
) -> int:
    """POST one notice to one user's own webhook, once (a failure is logged and shown to them
    on their settings page, not retried). The URL is read here: it never travels the broker."""
    return send_to_personal_webhook(
        user_id=user_id, subject=subject, body=body, link=link, event=event
    )
