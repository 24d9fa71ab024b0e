"""Version stamps of tenant data, kept in the shared cache; cached API pages are checked on them.

A stamp names one kind of data ("gpu-requests") for one team, plus one stamp for the whole
kind that admins' views depend on. Any write to that data gives its teams' stamps and the
whole-kind stamp a fresh random value once the transaction has committed; a cached page records
the stamps it was computed under and is served only while they are all unchanged.

Stamps are random values rather than counters so that losing one (Redis restarted or evicted
it) can never make an old page match again: a missing stamp is a miss, and gets a new value.
Stamps are read before the database, and changed after the commit, so a page is never stored
under a stamp newer than the rows it shows.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from typing import Any

from django.core.cache import cache
from django.db import transaction
from redis.exceptions import RedisError

logger = logging.getLogger(__name__)

ALL_TEAMS = "all"
STAMP_SECONDS = 7 * 24 * 3600


def stamp_key(kind: str, team: int | str) -> str:
    return f"data-version:v1:{kind}:{team}"


def changed(kind: str, team_ids: Iterable[int | None]) -> None:
    """Record that `kind` data of these teams changed; takes effect when the transaction commits.

    Inside a transaction the stamps also change at once: a concurrent reader then recomputes
    from the rows it sees and stores that under a stamp the commit replaces again. All the
    changes of one transaction are renewed together at its commit (a submission changes a
    request three times).
    """
    keys = [stamp_key(kind, team_id) for team_id in set(team_ids) if team_id is not None]
    keys.append(stamp_key(kind, ALL_TEAMS))
    _renew(keys)
    connection = transaction.get_connection()
    if connection.in_atomic_block:
        _renewal_at_commit(connection).keys.update(keys)


class _RenewalAtCommit:
    def __init__(self) -> None:
        self.keys: set[str] = set()

    def __call__(self) -> None:
        _renew(sorted(self.keys))


def _renewal_at_commit(connection: Any) -> _RenewalAtCommit:
    """The commit-time renewal this transaction has queued already, or a new one.

    It is looked up among the connection's pending commit callbacks rather than remembered
    beside them, because rolling back a savepoint discards the callbacks queued inside it: a
    renewal found there is one that will run.
    """
    for _savepoints, callback, _robust in connection.run_on_commit:
        if isinstance(callback, _RenewalAtCommit):
            return callback
    renewal = _RenewalAtCommit()
    transaction.on_commit(renewal)
    return renewal


def start_missing(keys: list[str]) -> None:
    """Give stamps that are not there yet a value (without replacing one set meanwhile)."""
    try:
        for key in keys:
            cache.add(key, uuid.uuid4().hex, STAMP_SECONDS)
    except RedisError:
        logger.warning("data version stamps not started: cache unreachable")


def _renew(keys: list[str]) -> None:
    try:
        cache.set_many({key: uuid.uuid4().hex for key in keys}, STAMP_SECONDS)
    except RedisError:
        # Pages kept under the old stamps still expire (LIST_CACHE_SECONDS).
        logger.error("data version stamps not renewed: cache unreachable (%s)", ", ".join(keys))
