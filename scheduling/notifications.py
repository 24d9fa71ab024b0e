"""Telling owners and leads what happened: email by default, a webhook when configured."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.conf import settings

from scheduling import dispatch


def notify(*, users: Iterable[Any], subject: str, body: str, event: dict[str, Any]) -> None:
    """Queue the notice to go out after the transaction commits; never fails the caller.

    Nothing is queued when there is no one to email and no webhook to call.
    """
    recipients = sorted({user.email for user in users if getattr(user, "email", "")})
    if not recipients and not settings.NOTIFICATION_WEBHOOK_URL:
        return
    dispatch.request_notification(recipients, subject, body, event)
