"""Telling owners and leads what happened: email by default, a webhook when configured."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.db import transaction

log = logging.getLogger(__name__)


def notify(*, users: Iterable[Any], subject: str, body: str, event: dict[str, Any]) -> None:
    """Queue the notice to go out after the transaction commits; never fails the caller.

    Nothing is queued when there is no one to email and no webhook to call.
    """
    recipients = sorted({user.email for user in users if getattr(user, "email", "")})
    if not recipients and not settings.NOTIFICATION_WEBHOOK_URL:
        return

    def enqueue() -> None:
        from scheduling.tasks import send_notification  # tasks import the services using us

        try:
            send_notification.delay(recipients, subject, body, event)
        except Exception:  # the broker being down must not undo a committed decision
            log.exception("could not queue notification %r", subject)

    transaction.on_commit(enqueue)
