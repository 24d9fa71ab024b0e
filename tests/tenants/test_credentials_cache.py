"""Verified API tokens recalled from the cache: no query per call, and no stale access."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.core.cache import cache, caches
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from knox.models import AuthToken
from rest_framework.test import APIClient

from tenants import credentials_cache
from tenants.choices import Role
from tenants.models import Membership
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db
SUMMARY = "/api/v1/requests/summary/"


@pytest.fixture(autouse=True)
def _empty_cache() -> None:
    cache.clear()


def test_a_known_token_costs_no_query(org: Org) -> None:
    client = api_client(org.dev_a)
    assert client.get(SUMMARY).status_code == 200  # verified, and the summary computed
    with CaptureQueriesContext(connection) as captured:
        assert client.get(SUMMARY).status_code == 200
    assert len(captured) == 0


def test_the_cache_keeps_no_token_in_clear(org: Org) -> None:
    _, token = AuthToken.objects.create(user=org.dev_a)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.get(reverse("me")).status_code == 200
    stored = AuthToken.objects.get(user=org.dev_a)
    assert credentials_cache.recall(stored.digest) is not None
    assert not any(token in str(key) for key in _cache_keys())


def _cache_keys() -> list[Any]:
    backend: Any = cache._cache if hasattr(cache, "_cache") else None  # locmem keeps a dict
    if isinstance(backend, dict):
        return list(backend)
    client = cache._cache.get_client()  # type: ignore[attr-defined]
    return [key.decode() for key in client.keys("*")]


def test_logout_ends_a_token_already_kept(org: Org) -> None:
    client = api_client(org.dev_a)
    assert client.get(reverse("me")).status_code == 200
    assert client.post(reverse("auth-logout")).status_code == 204
    assert client.get(reverse("me")).status_code == 401


def test_logout_all_ends_every_kept_token(org: Org) -> None:
    first, second = api_client(org.dev_a), api_client(org.dev_a)
    assert first.get(reverse("me")).status_code == 200
    assert second.get(reverse("me")).status_code == 200
    assert first.post(reverse("auth-logout-all")).status_code == 204
    assert second.get(reverse("me")).status_code == 401


def test_deactivation_ends_a_token_already_kept(org: Org) -> None:
    client = api_client(org.dev_a)
    assert client.get(reverse("me")).status_code == 200
    org.dev_a.is_active = False
    org.dev_a.save()
    assert client.get(reverse("me")).status_code == 401


def test_a_lost_role_is_lost_at_once(org: Org) -> None:
    client = api_client(org.lead_a)
    assert client.get(reverse("audit-event-list")).status_code == 200
    Membership.objects.filter(user=org.lead_a, team=org.team_a).get().delete()
    Membership.objects.create(user=org.lead_a, team=org.team_a, role=Role.DEVELOPER)
    assert client.get(reverse("audit-event-list")).status_code == 403


def test_a_kept_token_past_its_expiry_is_refused(org: Org, monkeypatch: Any) -> None:
    instance, token = AuthToken.objects.create(user=org.dev_a, expiry=timedelta(hours=1))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.get(reverse("me")).status_code == 200
    assert credentials_cache.recall(instance.digest) is not None
    later = timezone.now() + timedelta(hours=2)
    monkeypatch.setattr("tenants.credentials_cache.timezone.now", lambda: later)
    monkeypatch.setattr("tenants.api.auth.timezone.now", lambda: later)
    assert client.get(reverse("me")).status_code == 401
    assert not AuthToken.objects.filter(pk=instance.pk).exists()  # refused and deleted


def test_an_unknown_token_is_refused_and_not_kept(org: Org) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token " + "ab" * 32)
    assert client.get(reverse("me")).status_code == 401
    assert client.get(reverse("me")).status_code == 401


def test_the_password_hash_is_not_kept_and_a_recalled_user_saves_safely(org: Org) -> None:
    instance, token = AuthToken.objects.create(user=org.dev_a)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.get(reverse("me")).status_code == 200
    kept = credentials_cache.recall(instance.digest)
    assert kept is not None
    assert "password" not in kept.user.__dict__
    kept.user.first_name = "Alice"
    kept.user.save()  # as any code holding request.user might
    org.dev_a.refresh_from_db()
    assert org.dev_a.first_name == "Alice"
    assert org.dev_a.check_password("pw-dev_a")


def test_a_token_read_just_before_a_change_is_not_kept_after_it(org: Org) -> None:
    """The race: a request verifies a token from the old rows, the user is deactivated, and
    only then does that request try to keep what it read."""
    instance, token = AuthToken.objects.create(user=org.dev_a)
    read_before = AuthToken.objects.select_related("user").get(pk=instance.pk)
    org.dev_a.is_active = False
    org.dev_a.save()
    credentials_cache.remember(read_before)
    assert credentials_cache.recall(instance.digest) is None
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.get(reverse("me")).status_code == 401


def test_signing_in_on_the_web_keeps_the_api_token_kept(org: Org) -> None:
    from django.test import Client

    client = api_client(org.dev_a)
    assert client.get(SUMMARY).status_code == 200
    assert Client().login(username="dev_a", password="pw-dev_a")  # writes last_login only
    with CaptureQueriesContext(connection) as captured:
        assert client.get(SUMMARY).status_code == 200
    assert len(captured) == 0


@pytest.fixture
def redis_cache(settings: Any, redis_url: str) -> None:
    """The shared cache on a real Redis, where process copies are kept."""
    settings.CACHES = {
        **settings.CACHES,
        "default": {"BACKEND": "portal.cache.PortalRedisCache", "LOCATION": redis_url},
    }
    cache.clear()


def _kept_digest(org: Org) -> tuple[str, APIClient]:
    _, token = AuthToken.objects.create(user=org.dev_a)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.get(SUMMARY).status_code == 200
    return AuthToken.objects.get(user=org.dev_a).digest, client


@dataclass
class CopiedToken:
    copies: credentials_cache.ProcessCopies  # another process's, with its own subscription
    key: str
    token: AuthToken
    client: APIClient  # presents the token


def _copied_in_another_process(org: Org, seconds: float = 30) -> CopiedToken:
    """A kept token, and another process's copies holding it."""
    digest, client = _kept_digest(org)
    copies = credentials_cache.ProcessCopies()
    key = credentials_cache._key(digest)
    token = credentials_cache.recall(digest)
    assert token is not None
    copies.put(key, token, seconds)
    assert copies.get(key) is not None
    return CopiedToken(copies, key, token, client)


@pytest.mark.usefixtures("redis_cache")
def test_a_process_copy_costs_no_round_trip_to_redis(org: Org, monkeypatch: Any) -> None:
    digest, client = _kept_digest(org)
    assert credentials_cache.recall(digest) is not None  # now copied in this process

    def unreachable(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the shared cache was read")

    monkeypatch.setattr(caches["default"], "get", unreachable)
    with CaptureQueriesContext(connection) as captured:
        assert client.get(SUMMARY).status_code == 200
    assert len(captured) == 0


@pytest.mark.usefixtures("redis_cache")
def test_a_burial_in_another_process_drops_this_processs_copy(org: Org) -> None:
    copied = _copied_in_another_process(org)

    credentials_cache.forget([copied.token.digest])  # as logout, deactivation, a role change

    assert copied.copies.get(copied.key) is None


@pytest.mark.usefixtures("redis_cache")
def test_logout_seen_by_another_process_on_its_next_call(org: Org) -> None:
    copied = _copied_in_another_process(org)

    assert copied.client.post(reverse("auth-logout")).status_code == 204

    assert copied.copies.get(copied.key) is None
    assert copied.client.get(SUMMARY).status_code == 401


@pytest.mark.usefixtures("redis_cache")
def test_a_broken_subscription_drops_every_copy(org: Org, monkeypatch: Any) -> None:
    copied = _copied_in_another_process(org)
    copies, key, token = copied.copies, copied.key, copied.token

    client: Any = cache._cache.get_client(write=True)  # type: ignore[attr-defined]
    client.execute_command("CLIENT", "KILL", "TYPE", "pubsub")  # e.g. Redis restarted

    assert copies.get(key) is None  # dropped, not served from a channel that may miss burials
    copies.put(key, token, 30)
    assert copies.get(key) is None  # no new subscription for a moment

    later = credentials_cache.time.monotonic() + credentials_cache.RESUBSCRIBE_SECONDS + 1
    monkeypatch.setattr(credentials_cache.time, "monotonic", lambda: later)
    copies.put(key, token, 30)  # subscribes again, confirmed, and keeps copies again
    assert copies.get(key) is not None


@pytest.mark.usefixtures("redis_cache")
def test_a_copy_lives_only_its_short_lifetime(org: Org, monkeypatch: Any) -> None:
    copied = _copied_in_another_process(org, seconds=3_600)
    later = credentials_cache.time.monotonic() + credentials_cache.PROCESS_COPY_SECONDS + 1
    monkeypatch.setattr(credentials_cache.time, "monotonic", lambda: later)
    assert copied.copies.get(copied.key) is None


def test_without_redis_no_process_copies_are_kept(org: Org, settings: Any) -> None:
    """The embedded demo's cache is in memory: no channel to hear burials on, so no copies."""
    settings.CACHES = {
        **settings.CACHES,
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    }
    digest, _ = _kept_digest(org)
    copies = credentials_cache.ProcessCopies()
    token = credentials_cache.recall(digest)
    assert token is not None
    copies.put(credentials_cache._key(digest), token, 30)
    assert copies.get(credentials_cache._key(digest)) is None
