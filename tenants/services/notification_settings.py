"""Each user's notification settings: which topics reach them on which channel, and the one
message their own webhook gets per notice."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from tenants.models import NotificationSettings
from tenants.scope import Actor
from tenants.services.organisation import apply_changes, known_fields, save_valid
from tenants.services.webhooks import post_to_public_address, webhook_payload
from tenants.validators import UnsafeWebhookAddress

log = logging.getLogger(__name__)

NOTIFICATION_SETTINGS_FIELDS = frozenset(
    {
        "in_app_topics",
        "email_enabled",
        "email_topics",
        "webhook_url",
        "webhook_format",
        "webhook_topics",
    }
)


@transaction.atomic
def update_notification_settings(*, actor: Actor, **fields: Any) -> NotificationSettings:
    """Change the actor's own settings (only theirs: there is no way to name another user's);
    a URL that is not https to a public address is a 400 naming `webhook_url`."""
    row, _ = NotificationSettings.objects.select_for_update().get_or_create(user_id=actor.pk)
    changed = apply_changes(row, known_fields(fields, NOTIFICATION_SETTINGS_FIELDS))
    if "webhook_url" in changed:
        row.webhook_last_sent_at = None
        row.webhook_last_result = ""
    save_valid(row)
    return row


def send_to_personal_webhook(
    *, user_id: int, subject: str, body: str, link: str, event: dict[str, Any]
) -> int:
    """POST one notice to the user's own webhook, once, with a short timeout; the receiver's
    status, or 0 when it was not sent. A failure is logged and kept as the webhook's last
    result for its owner to see; it never raises."""
    row = NotificationSettings.objects.filter(user_id=user_id).first()
    if row is None or not row.webhook_url:
        return 0
    payload = webhook_payload(
        payload_format=row.webhook_format, subject=subject, body=body, link=link, event=event
    )
    status = 0
    try:
        status = post_to_public_address(
            url=row.webhook_url,
            payload=payload,
            timeout=settings.PERSONAL_WEBHOOK_TIMEOUT_SECONDS,
        )
        result = f"Delivered (HTTP {status})."
    except ValidationError as error:
        result = f"Not sent: {' '.join(error.messages)}"
    except UnsafeWebhookAddress as error:
        result = f"Not sent: {error}"
    except Exception as error:
        result = f"Failed: {error or type(error).__name__}"
    if not status:
        log.warning("webhook of user %s: %s", user_id, result)
    NotificationSettings.objects.filter(user_id=user_id).update(
        webhook_last_sent_at=timezone.now(), webhook_last_result=result[:200]
    )
    return status
