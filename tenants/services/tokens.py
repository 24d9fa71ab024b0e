"""Personal API tokens with a name and a last-used time (knox stores neither).

Signing in again under the same name replaces that name's token, so a script that signs in on
every run keeps one live token rather than one per run.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone
from knox.models import AuthToken

from tenants.models import ApiTokenLabel

DEFAULT_TOKEN_NAME = "API sign-in"
# A token's last use is written at most this often: one UPDATE a minute, not one per call.
LAST_USED_PRECISION = timedelta(minutes=1)


@transaction.atomic
def issue_api_token(*, user: Any, name: str = "") -> tuple[AuthToken, str, int]:
    """A new token named `name` for `user`; returns it, its plain text (shown once) and how
    many earlier tokens of that name it replaced."""
    name = (name or DEFAULT_TOKEN_NAME).strip()[:64] or DEFAULT_TOKEN_NAME
    _, deleted = AuthToken.objects.filter(user=user, label__name=name).delete()
    instance, token = AuthToken.objects.create(user=user)
    ApiTokenLabel.objects.create(token=instance, name=name)
    return instance, token, deleted.get("knox.AuthToken", 0)


def note_token_use(token: AuthToken) -> None:
    """Record that `token` authenticated a request now (at most once a minute per token).

    One UPDATE, which touches no row while the last use is recent; a token made without a name
    (outside `issue_api_token`) has no label and keeps no last-use time.
    """
    now = timezone.now()
    ApiTokenLabel.objects.filter(token=token).exclude(
        last_used_at__gt=now - LAST_USED_PRECISION
    ).update(last_used_at=now)
