"""The Redis cache backend keeps one client per pool and still behaves as Django's."""

from __future__ import annotations

from typing import Any

from portal.cache import PortalRedisCache


def test_one_client_serves_every_call_and_values_round_trip(redis_url: str) -> None:
    cache = PortalRedisCache(redis_url, {"KEY_PREFIX": "test-cache-backend"})
    cache.set("answer", {"teams": [1, 2]}, 30)
    assert cache.get("answer") == {"teams": [1, 2]}
    assert cache.get_many(["answer", "missing"]) == {"answer": {"teams": [1, 2]}}
    assert cache.add("answer", "other", 30) is False
    cache.delete_many(["answer"])
    assert cache.get("answer") is None
    backend: Any = cache  # the client is private, so not in the stubs
    assert backend._cache.get_client(write=True) is backend._cache.get_client()
