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

Each process also keeps its own copies of the tokens it recalled (`ProcessCopies`), so a
polling client costs no round trip to Redis either. A copy is never served stale: burying
entries also publishes their keys on a Redis channel every process subscribes to, and a
process applies every message already delivered to it before it serves a copy, as Redis
clients do for their server-assisted caches. A process whose subscription is broken, or not
confirmed yet, keeps no copies; and a copy lives at most PROCESS_COPY_SECONDS.

The cache is an optimisation: when Redis is unreachable, authentication reads the database.
"""

from __future__ import annotations

import copy
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.utils import timezone
from knox.models import AuthToken
from redis.connection import Connection, parse_url
from redis.exceptions import RedisError

logger = logging.getLogger(__name__)

KEY_PREFIX = "api-credentials:v1:"
REVOKED = "revoked"  # the tombstone left where an entry was dropped
CHANNEL = "api-credentials:v1:buried"  # the keys of buried entries
PROCESS_COPY_SECONDS = 10
PROCESS_COPIES_KEPT = 10_000
RESUBSCRIBE_SECONDS = 1.0


def _key(digest: str) -> str:
    return KEY_PREFIX + digest


class ProcessCopies:
    """This process's copies of recalled tokens, dropped when any process buries them.

    The subscription is a connection of its own, read by the request asking for a copy (under
    a lock, for threaded servers), and never reconnected behind our back: when it breaks,
    every copy goes and the next request subscribes again, keeping copies only once Redis has
    confirmed the subscription.
    """

    def __init__(self) -> None:
        self._copies: OrderedDict[str, tuple[float, AuthToken]] = OrderedDict()
        self._subscription: Any = None
        self._pid = 0
        self._lock = threading.Lock()
        self._resubscribe_after = 0.0

    def get(self, key: str) -> AuthToken | None:
        with self._lock:
            if not self._listening():
                return None
            kept = self._copies.get(key)
            if kept is None:
                return None
            deadline, token = kept
            if deadline <= time.monotonic():
                del self._copies[key]
                return None
        return _copy_of(token)

    def put(self, key: str, token: AuthToken, seconds: float) -> None:
        copied = _copy_of(token)
        with self._lock:
            if not self._listening():
                return
            lifetime = min(seconds, PROCESS_COPY_SECONDS)
            self._copies[key] = (time.monotonic() + lifetime, copied)
            self._copies.move_to_end(key)
            while len(self._copies) > PROCESS_COPIES_KEPT:
                self._copies.popitem(last=False)

    def drop(self, keys: Iterable[str]) -> None:
        with self._lock:
            self._drop(keys)

    def clear(self) -> None:
        with self._lock:
            self._copies.clear()

    def _drop(self, keys: Iterable[str]) -> None:
        for key in keys:
            self._copies.pop(key, None)

    def _listening(self) -> bool:
        """Apply every burial delivered so far; False (and no copies) without a subscription."""
        if self._pid != os.getpid():  # a forked worker: the parent's socket is not ours
            self._subscription, self._pid = None, os.getpid()
            self._copies.clear()
        try:
            if self._subscription is None:
                if time.monotonic() < self._resubscribe_after:
                    return False  # Redis failed a moment ago: no wait on it for every request
                self._subscription = _subscribe()
                if self._subscription is None:
                    return False
            while self._subscription.can_read(timeout=0):
                self._apply(self._subscription.read_response())
        except (RedisError, OSError, ValueError):
            logger.warning("credentials channel lost; process copies dropped")
            self._drop_subscription()
            return False
        return True

    def _apply(self, message: Any) -> None:
        if not isinstance(message, list) or len(message) != 3 or message[0] != b"message":
            raise ValueError(f"unexpected message on the credentials channel: {message!r}")
        self._drop(message[2].decode().split())

    def _drop_subscription(self) -> None:
        self._copies.clear()
        self._resubscribe_after = time.monotonic() + RESUBSCRIBE_SECONDS
        if self._subscription is not None:
            self._subscription.disconnect()
        self._subscription = None


def _redis_client() -> Any:
    """The shared cache's Redis client; None when the cache is not Redis (the embedded demo)."""
    backend: Any = cache
    if not hasattr(backend, "_cache") or not hasattr(backend._cache, "get_client"):
        return None
    return backend._cache.get_client(write=True)


def _subscribe() -> Any:
    if _redis_client() is None:
        return None
    location = cache._servers[0]  # type: ignore[attr-defined]  # the cache's (first) server URL
    # RESP2: messages arrive as plain replies (RESP3 would hand them to push handlers).
    options = {
        **parse_url(location),
        "protocol": 2,
        "socket_timeout": 5,
        "socket_connect_timeout": 5,
    }
    connection = options.pop("connection_class", Connection)(**options)
    connection.send_command("SUBSCRIBE", CHANNEL)
    reply = connection.read_response()
    if not isinstance(reply, list) or reply[0] != b"subscribe":
        connection.disconnect()
        raise ValueError(f"unexpected reply to SUBSCRIBE: {reply!r}")
    return connection


def _copy_of(token: AuthToken) -> AuthToken:
    """A token and user of its own for each request: a request may change its user object."""
    copied = copy.copy(token)
    copied.user = copy.copy(token.user)
    return copied


process_copies = ProcessCopies()


def recall(digest: str) -> AuthToken | None:
    """The verified token with this digest, its user and scope loaded; None when not kept."""
    key = _key(digest)
    token: AuthToken | str | None = process_copies.get(key)
    if token is None:
        try:
            token = cache.get(key)
        except RedisError:
            logger.warning("credentials cache unreachable; reading the token from the database")
            return None
        if isinstance(token, AuthToken):
            process_copies.put(key, token, _seconds_left(token))
    if not isinstance(token, AuthToken):
        return None  # not kept, or dropped a moment ago
    if token.expiry is not None and token.expiry <= timezone.now():
        return None  # the database path refuses it and deletes it
    return token


def _seconds_left(token: AuthToken) -> float:
    seconds = float(settings.CREDENTIALS_CACHE_SECONDS)
    if token.expiry is not None:
        seconds = min(seconds, (token.expiry - timezone.now()).total_seconds())
    return seconds


def remember(token: AuthToken) -> None:
    """Keep a token that was just verified against the database (user and scope loaded)."""
    seconds = _seconds_left(token)
    if seconds < 1:
        return
    kept = _copy_of(token)
    # The password hash stays in the database: without it in the instance Django treats the
    # field as deferred, so reading it loads it and saving the user leaves it untouched.
    kept.user.__dict__.pop("password", None)
    key = _key(token.digest)
    try:
        added = cache.add(key, kept, int(seconds))
    except RedisError:
        logger.warning("credentials cache unreachable; token not kept")
        return
    if added:  # not over a tombstone
        process_copies.put(key, kept, seconds)


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
    process_copies.drop(keys)
    try:
        cache.set_many(dict.fromkeys(keys, REVOKED), settings.CREDENTIALS_CACHE_SECONDS)
    except RedisError:
        # The entries still expire within CREDENTIALS_CACHE_SECONDS.
        logger.error("credentials cache unreachable; %d token entries left to expire", len(keys))
    client = _redis_client()
    if client is None:
        return
    try:
        client.publish(CHANNEL, " ".join(keys))
    except RedisError:
        # Every process's subscription is on the same server: theirs broke too, and a broken
        # subscription drops all copies.
        logger.error("credentials channel unreachable; burial not announced")
