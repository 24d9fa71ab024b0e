"""A revoked token, a deactivated user and a demoted user are refused on the very next request.

Each case runs with the in-process cache and with the cache on Redis: token verification reads
the database on every request (knox as shipped), so neither may make a difference.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse
from knox.models import AuthToken
from rest_framework.test import APIClient

from tenants.choices import Role
from tenants.models import Membership
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db
AUDIT = "/api/v1/audit/"


@pytest.fixture(params=["in-process cache", "redis cache"])
def cache_backend(request: pytest.FixtureRequest, settings: Any) -> str:
    if request.param == "redis cache":
        redis_url = request.getfixturevalue("redis_url")
        settings.CACHES = {
            **settings.CACHES,
            "default": {
                "BACKEND": "django.core.cache.backends.redis.RedisCache",
                "LOCATION": redis_url,
                "KEY_PREFIX": "test-token-revocation",
            },
        }
    else:
        settings.CACHES = {
            **settings.CACHES,
            "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        }
    return str(request.param)


def test_a_revoked_token_is_refused_on_the_next_request(org: Org, cache_backend: str) -> None:
    client = api_client(org.dev_a)
    assert client.get(reverse("me")).status_code == 200
    AuthToken.objects.filter(user=org.dev_a).delete()
    assert client.get(reverse("me")).status_code == 401


def test_a_token_logged_out_elsewhere_is_refused(org: Org, cache_backend: str) -> None:
    client = api_client(org.dev_a)
    other = api_client(org.dev_a)
    assert client.get(reverse("me")).status_code == 200
    assert other.post(reverse("auth-logout-all")).status_code == 204
    assert client.get(reverse("me")).status_code == 401


def test_a_deactivated_user_is_refused_on_the_next_request(org: Org, cache_backend: str) -> None:
    client = api_client(org.dev_a)
    assert client.get(reverse("me")).status_code == 200
    org.dev_a.is_active = False
    org.dev_a.save()
    assert client.get(reverse("me")).status_code == 401


def test_a_user_deactivated_by_a_bulk_update_is_refused(org: Org, cache_backend: str) -> None:
    """No save signal runs here: knox's own check of `is_active` refuses the token."""
    client = api_client(org.dev_a)
    assert client.get(reverse("me")).status_code == 200
    type(org.dev_a).objects.filter(pk=org.dev_a.pk).update(is_active=False)
    response = client.get(reverse("me"))
    assert response.status_code == 401


def test_a_demoted_lead_loses_the_lead_pages_on_the_next_request(
    org: Org, cache_backend: str
) -> None:
    client = api_client(org.lead_a)
    assert client.get(AUDIT).status_code == 200
    Membership.objects.filter(user=org.lead_a, team=org.team_a).update(role=Role.DEVELOPER)
    assert client.get(AUDIT).status_code == 403
    assert client.get(reverse("me")).json()["primary_role"] == Role.DEVELOPER


def test_a_removed_member_no_longer_sees_the_team(org: Org, cache_backend: str) -> None:
    client = api_client(org.dev_a)
    team_url = reverse("team-detail", args=[org.team_a.pk])
    assert client.get(team_url).status_code == 200
    Membership.objects.filter(user=org.dev_a, team=org.team_a).delete()
    assert client.get(team_url).status_code == 404


def test_a_removed_platform_admin_is_refused_admin_pages(org: Org, cache_backend: str) -> None:
    client = api_client(org.admin)
    assert client.get(AUDIT).status_code == 200
    Membership.objects.filter(user=org.admin, role=Role.PLATFORM_ADMIN).delete()
    assert client.get(AUDIT).status_code == 403


def test_a_new_token_works_at_once(org: Org, cache_backend: str) -> None:
    _, token = AuthToken.objects.create(user=org.dev_b)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.get(reverse("me")).json()["username"] == "dev_b"
