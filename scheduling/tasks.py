"""Thin Celery tasks of the request side: take ids or plain values, call one service."""

from __future__ import annotations

import json
import logging
import urllib.request
from typing import Any

from celery import shared_task
from django.conf import settings
from django.core.mail import send_mail

from scheduling import services

log = logging.getLogger(__name__)


@shared_task(acks_late=True, autoretry_for=(OSError,), retry_backoff=True, max_retries=5)
def send_notification(
    recipients: list[str], subject: str, body: str, event: dict[str, Any]
) -> None:
    if recipients:
        send_mail(subject, body, settings.DEFAULT_FROM_EMAIL, recipients)
    if settings.NOTIFICATION_WEBHOOK_URL:
        payload = json.dumps({"subject": subject, "body": body, **event}).encode()
        request = urllib.request.Request(
            settings.NOTIFICATION_WEBHOOK_URL,
            data=payload,
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10):  # noqa: S310 — admin-configured URL
            pass


@shared_task(acks_late=True)
def expire_stale_approvals() -> int:
    return services.expire_stale_approvals()
