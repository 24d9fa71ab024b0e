"""API tokens already verified, kept in the shared cache so a request costs no database query.

Every API call used to pay two queries before any product code: the token (with its user) and
the user's memberships. Under load that was more than half of a cheap endpoint's time. A
verified token is now kept, with its user and the user's scope, under a key derived from the
token's digest (never the token itself, nor the user's password hash), for at most
CREDENTIALS_CACHE_SECONDS and never past the token's expiry.

What can change the answer replaces the entry with a tombstone, at once and again after the
transaction commits: deleting a token (logout, logout-all, expiry purge, deactivation), saving
a user (deactivation, superuser flag, password) and saving or deleting a membership (roles).
The receivers are in `tenants.signals`. An entry is only ever added where there is none, so a
request that read the old rows just before the change cannot put them back over the
tombstone; the token is read from the database until the tombstone expires.

The cache is an optimisation: when Redis is unreachable, authentication reads the database.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.utils import timezone
from knox.models import AuthToken
from redis.exceptions import RedisError

logger = logging.getLogger(__name__)

KEY_PREFIX = "api-credentials:v1:"
REVOKED = "revoked"  # the tombstone left where an entry was dropped


def _key(digest: str) -> str:
    return KEY_PREFIX + digest


def recall(digest: str) -> AuthToken | None:
    """The verified token with this digest, its user and scope loaded; None when not kept."""
    try:
        token: AuthToken | str | None = cache.get(_key(digest))
    except RedisError:
        logger.warning("credentials cache unreachable; reading the token from the database")
        return None
    if not isinstance(token, AuthToken):
        return None  # not kept, or dropped a moment ago
    if token.expiry is not None and token.expiry <= timezone.now():
        return None  # the database path refuses it and deletes it
    return token


def remember(token: AuthToken) -> None:
    """Keep a token that was just verified against the database (user and scope loaded)."""
    seconds = float(settings.CREDENTIALS_CACHE_SECONDS)
    if seconds <= 0:
        return
    expiry: datetime | None = token.expiry
    if expiry is not None:
        seconds = min(seconds, (expiry - timezone.now()).total_seconds())
        if seconds < 1:
            return
    user = copy.copy(token.user)
    # The password hash stays in the database: without it in the instance Django treats the
    # field as deferred, so reading it loads it and saving the user leaves it untouched.
    user.__dict__.pop("password", None)
    kept = copy.copy(token)
    kept.user = user
    try:
        cache.add(_key(token.digest), kept, int(seconds))
    except RedisError:
        logger.warning("credentials cache unreachable; token not kept")


def forget(digests: Iterable[str]) -> None:
    """Drop these tokens now and once more when the current transaction commits."""
    keys = [_key(digest) for digest in digests]
    if not keys:
        return
    _bury(keys)
    transaction.on_commit(lambda: _bury(keys))


def forget_user(user_id: Any) -> None:
    """Drop every kept token of this user (their roles, flags or state changed)."""
    forget(AuthToken.objects.filter(user_id=user_id).values_list("digest", flat=True))


def _bury(keys: list[str]) -> None:
    try:
        cache.set_many(dict.fromkeys(keys, REVOKED), settings.CREDENTIALS_CACHE_SECONDS)
    except RedisError:
        # The entries still expire within CREDENTIALS_CACHE_SECONDS.
        logger.error("credentials cache unreachable; %d token entries left to expire", len(keys))
