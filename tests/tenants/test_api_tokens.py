"""Personal API tokens: named, last use recorded, and signing in again does not pile them up."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse
from knox.models import AuthToken
from rest_framework.test import APIClient

from tenants.models import ApiTokenLabel
from tenants.services.tokens import DEFAULT_TOKEN_NAME
from tests.support.personas import Org

pytestmark = pytest.mark.django_db


def sign_in(name: str | None = None) -> dict[str, object]:
    body = {"username": "dev_a", "password": "pw-dev_a"}
    if name is not None:
        body["name"] = name
    response = APIClient().post(reverse("auth-token"), body, format="json")
    assert response.status_code == 201, response.content
    data: dict[str, object] = response.json()
    return data


def test_signing_in_again_under_the_same_name_replaces_the_token(org: Org) -> None:
    first = sign_in()
    second = sign_in()
    laptop = sign_in("gpuctl on laptop")

    assert first["name"] == second["name"] == DEFAULT_TOKEN_NAME
    assert (first["replaced"], second["replaced"], laptop["replaced"]) == (0, 1, 0)
    assert AuthToken.objects.filter(user=org.dev_a).count() == 2
    old = APIClient()
    old.credentials(HTTP_AUTHORIZATION=f"Token {first['token']}")
    assert old.get(reverse("me")).status_code == 401


def test_a_request_with_a_token_records_its_last_use(org: Org) -> None:
    token = sign_in("script")["token"]
    label = ApiTokenLabel.objects.get(token__user=org.dev_a)
    assert label.last_used_at is None

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.get(reverse("me")).status_code == 200
    label.refresh_from_db()
    assert label.last_used_at is not None


def test_the_tokens_page_names_tokens_and_shows_their_last_use(org: Org) -> None:
    client = Client()
    client.force_login(org.dev_a)
    response = client.post(reverse("api-tokens"), {"name": "notebook"})
    page = response.content.decode()
    assert "notebook" in page
    assert 'data-testid="new-token"' in page
    assert "never" in page  # not used yet

    again = client.post(reverse("api-tokens"), {"name": "notebook"}).content.decode()
    assert "replaces the earlier token" in again
    assert AuthToken.objects.filter(user=org.dev_a).count() == 1
