"""Periodic housekeeping of the organisation."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone
from knox.models import AuthToken


@shared_task(acks_late=True)
def purge_expired_api_tokens() -> int:
    """Delete API tokens past expiry: knox refuses them already; this keeps the table small."""
    _, by_model = AuthToken.objects.filter(expiry__lt=timezone.now()).delete()
    deleted = by_model.get("knox.AuthToken", 0)
    return deleted
