from __future__ import annotations

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db


def test_token_is_issued_for_valid_credentials_and_authenticates(org: Org) -> None:
    client = APIClient()
    response = client.post(
        reverse("auth-token"), {"username": "dev_a", "password": "pw-dev_a"}, format="json"
    )
    assert response.status_code == 201
    token = response.json()["token"]
    assert response.json()["expiry"]

    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.get(reverse("me")).json()["username"] == "dev_a"


def test_token_request_with_wrong_password_is_400_with_error_shape(org: Org) -> None:
    response = APIClient().post(
        reverse("auth-token"), {"username": "dev_a", "password": "nope"}, format="json"
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid"
    assert "credentials" in error["message"]


def test_token_request_without_fields_names_them(org: Org) -> None:
    response = APIClient().post(reverse("auth-token"), {}, format="json")
    assert response.status_code == 400
    assert set(response.json()["error"]["fields"]) == {"username", "password"}


def test_tokens_are_stored_hashed(org: Org) -> None:
    from knox.models import AuthToken

    response = APIClient().post(
        reverse("auth-token"), {"username": "dev_a", "password": "pw-dev_a"}, format="json"
    )
    token = response.json()["token"]
    stored = AuthToken.objects.get(user=org.dev_a)
    assert token not in (stored.digest, stored.token_key)


def test_logout_revokes_the_token(org: Org) -> None:
    client = api_client(org.dev_a)
    assert client.post(reverse("auth-logout")).status_code == 204
    response = client.get(reverse("me"))
    assert response.status_code == 401
    assert response.json()["error"]["code"] in {"authentication_failed", "not_authenticated"}


def test_expired_token_is_refused(org: Org) -> None:
    from datetime import timedelta

    from knox.models import AuthToken

    _, token = AuthToken.objects.create(user=org.dev_a, expiry=timedelta(seconds=-1))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.get(reverse("me")).status_code == 401


def test_deactivated_user_token_stops_working(org: Org) -> None:
    client = api_client(org.dev_a)
    org.dev_a.is_active = False
    org.dev_a.save()
    assert client.get(reverse("me")).status_code == 401


def test_anonymous_api_access_is_401_with_error_shape(org: Org) -> None:
    response = APIClient().get(reverse("me"))
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"


def test_me_lists_roles(org: Org) -> None:
    body = api_client(org.lead_a).get(reverse("me")).json()
    assert body["primary_role"] == "team_lead"
    assert body["roles"] == [
        {"role": "team_lead", "team": {"id": org.team_a.pk, "name": "Team A", "slug": "team-a"}}
    ]
    assert api_client(org.finance).get(reverse("me")).json()["primary_role"] == "finance"
    assert api_client(org.admin).get(reverse("me")).json()["primary_role"] == "platform_admin"


def test_unknown_api_path_is_404_in_error_shape(org: Org) -> None:
    response = api_client(org.dev_a).get("/api/v1/no-such-thing/")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_malformed_json_is_400_not_500(org: Org) -> None:
    response = api_client(org.admin).post(
        reverse("team-list"), data="{not json", content_type="application/json"
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "parse_error"
