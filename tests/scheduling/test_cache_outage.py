"""Redis unreachable: reads never touch Redis and keep working; what needs Redis to
decide (rate limits) answers 503 with Retry-After — never a 500."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from scheduling.models import GpuRequest
from tests.scheduling.conftest import Fleet
from tests.scheduling.helpers import request_body
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db
REQUESTS = "/api/v1/requests/"


def take_redis_away(settings: Any) -> None:
    settings.CACHES = {
        **settings.CACHES,
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",  # nothing listens on port 1
        },
    }


@pytest.fixture
def redis_is_down(settings: Any) -> None:
    take_redis_away(settings)


def test_reads_fall_back_to_the_database(org: Org, fleet: Fleet, settings: Any) -> None:
    client = api_client(org.dev_a)
    created = client.post(
        REQUESTS, request_body(org.project_a, fleet.l4_12g, kind="notebook"), format="json"
    )
    assert created.status_code == 201, created.content
    take_redis_away(settings)
    listed = client.get(REQUESTS)
    assert listed.status_code == 200
    assert [row["id"] for row in listed.json()["results"]] == [created.json()["id"]]
    assert client.get(reverse("gpu-request-summary")).json()["total"] == 1
    assert client.get(reverse("me")).json()["username"] == "dev_a"


def test_a_rate_limited_write_is_503_with_retry_after(
    org: Org, fleet: Fleet, redis_is_down: None
) -> None:
    response = api_client(org.dev_a).post(
        REQUESTS, request_body(org.project_a, fleet.l4_12g, kind="notebook"), format="json"
    )
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert response.json()["error"]["code"] == "unavailable"
    assert not GpuRequest.objects.exists()


def test_token_sign_in_is_503_not_500(org: Org, redis_is_down: None) -> None:
    response = APIClient().post(
        reverse("auth-token"), {"username": "dev_a", "password": "pw-dev_a"}, format="json"
    )
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "unavailable"


def test_the_sign_in_page_is_503_not_500(org: Org, redis_is_down: None) -> None:
    response = Client().post(reverse("login"), {"username": "dev_a", "password": "pw-dev_a"})
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert b"Briefly unavailable" in response.content
