"""Long-lived responses and the cap on how many one user holds at a time.

A stream (a followed log) takes one of its user's STREAMS_PER_USER slots before it starts and
gives it back when it ends, however it ends (the work stopped, the time ran out, the client
went away). A slot is a cache key added atomically (`cache.add`: Redis SET NX, shared by every
web process) with a lease of SLOT_LEASE_SECONDS that the stream renews as it polls; a web
process that dies with streams open frees their slots when the leases run out.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.core.cache import cache

SLOT_LEASE_SECONDS = 30


class TooManyStreams(Exception):
    """The user already holds every slot; `retry_after_seconds` says when to ask again."""

    retry_after_seconds = SLOT_LEASE_SECONDS


@dataclass(slots=True)
class StreamSlot:
    """One held slot: its key, and the token that tells ours from a later holder's."""

    key: str
    token: str
    renewed_at: float = field(default_factory=time.monotonic)

    async def renew(self) -> None:
        """Keep the lease: a stream calls this on every poll; the cache is asked again only
        once a third of the lease has passed."""
        if time.monotonic() - self.renewed_at < SLOT_LEASE_SECONDS / 3:
            return
        self.renewed_at = time.monotonic()
        if await cache.aget(self.key) == self.token:
            await cache.atouch(self.key, SLOT_LEASE_SECONDS)

    async def release(self) -> None:
        if await cache.aget(self.key) == self.token:
            await cache.adelete(self.key)


def slot_key(user_id: int | None, index: int) -> str:
    return f"streams:user:{user_id}:{index}"


def take_stream_slot(*, holder: AbstractBaseUser | AnonymousUser) -> StreamSlot:
    """A free slot of the holder's, or TooManyStreams when all STREAMS_PER_USER are held."""
    token = uuid.uuid4().hex
    limit = settings.STREAMS_PER_USER
    for index in range(limit):
        key = slot_key(holder.pk, index)
        if cache.add(key, token, SLOT_LEASE_SECONDS):
            return StreamSlot(key=key, token=token)
    raise TooManyStreams(
        f"You already have {limit} streams open (the most one person may hold at a time). "
        "Close one, or read the log without follow."
    )
