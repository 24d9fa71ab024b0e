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
    """Record that `token` authenticated a request now (at most once a minute per token)."""
    now = timezone.now()
    updated = (
        ApiTokenLabel.objects.filter(token=token)
        .exclude(last_used_at__gt=now - LAST_USED_PRECISION)
        .update(last_used_at=now)
    )
    if not updated and not ApiTokenLabel.objects.filter(token=token).exists():
        ApiTokenLabel.objects.get_or_create(
            token=token, defaults={"name": "unnamed", "last_used_at": now}
        )
