"""Sessions and tokens: CSRF, rotation on sign-in, idle and absolute limits, revocation."""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.contrib.sessions.models import Session
from django.test import Client
from django.urls import reverse
from knox.models import AuthToken
from rest_framework.test import APIClient

from tenants.middleware import SESSION_SEEN_KEY, SESSION_STARTED_KEY
from tenants.models import AuditEvent
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db


def _sign_in(client: Client, user: Any) -> Any:
    return client.post(reverse("login"), {"username": user.username, "password": f"pw-{user}"})


def _csrf_client_signed_in(user: Any) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    return client


# Cookie-authenticated writes, each a real action a signed-in person could be tricked into.
COOKIE_WRITES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("api-tokens", {}, {}),
    ("logout", {}, {}),
    ("team-list", {}, {"name": "Forged", "slug": "forged"}),
    ("project-list", {}, {"name": "Forged", "slug": "forged"}),
    ("gpu-request-list", {}, {"gpu_count": 1}),
    ("membership-list", {}, {"user": 1, "role": "developer"}),
]


@pytest.mark.parametrize(("route", "kwargs", "body"), COOKIE_WRITES)
def test_cookie_authenticated_write_without_csrf_token_is_refused(
    org: Org, route: str, kwargs: dict[str, Any], body: dict[str, Any]
) -> None:
    client = _csrf_client_signed_in(org.lead_a)
    tokens_before = AuthToken.objects.count()
    response = client.post(reverse(route, kwargs=kwargs), body, content_type="application/json")
    assert response.status_code == 403, (route, response.status_code)
    assert AuthToken.objects.count() == tokens_before


def test_web_writes_of_every_page_need_the_csrf_token(org: Org) -> None:
    """The same write succeeds once the token from the page is sent along (the check is real)."""
    client = _csrf_client_signed_in(org.lead_a)
    url = reverse("api-tokens")
    assert client.post(url).status_code == 403
    client.get(url)
    token = client.cookies["csrftoken"].value
    assert client.post(url, HTTP_X_CSRFTOKEN=token).status_code == 200
    assert AuthToken.objects.filter(user=org.lead_a).count() == 1


def test_api_token_requests_need_no_csrf_token(org: Org) -> None:
    client = api_client(org.lead_a)
    client.enforce_csrf_checks = True
    response = client.post(reverse("project-list"), {"name": "Tok", "slug": "tok"}, format="json")
    assert response.status_code in (201, 400), response.content


def test_sign_in_rotates_the_session_key_and_is_audited(org: Org) -> None:
    client = Client()
    client.get(reverse("login"))
    client.session.save()
    anonymous_key = client.session.session_key
    assert _sign_in(client, org.dev_a).status_code == 302
    assert client.session.session_key != anonymous_key
    assert not Session.objects.filter(session_key=anonymous_key).exists()
    assert AuditEvent.objects.filter(action="auth.login", actor=org.dev_a).count() == 1


def test_failed_sign_in_is_audited_without_the_password(org: Org) -> None:
    Client().post(reverse("login"), {"username": "dev_a", "password": "wrong-secret"})
    event = AuditEvent.objects.get(action="auth.login_failed")
    assert event.data["username"] == "dev_a"
    assert "wrong-secret" not in str(event.data) + event.message


def test_logout_ends_the_session_server_side_and_is_audited(org: Org) -> None:
    client = Client()
    _sign_in(client, org.dev_a)
    stolen_cookie = client.cookies["sessionid"].value
    assert client.post(reverse("logout")).status_code == 302
    replay = Client()
    replay.cookies["sessionid"] = stolen_cookie
    assert replay.get(reverse("home")).status_code == 302  # to the sign-in page
    assert replay.get(reverse("me")).status_code in (401, 403)
    assert AuditEvent.objects.filter(action="auth.logout", actor=org.dev_a).exists()


def _age_session(client: Client, *, started_ago: int, seen_ago: int) -> None:
    session = client.session
    now = int(time.time())
    session[SESSION_STARTED_KEY] = now - started_ago
    session[SESSION_SEEN_KEY] = now - seen_ago
    session.save()


def test_idle_session_expires(org: Org, settings: Any) -> None:
    settings.SESSION_IDLE_TIMEOUT_SECONDS = 600
    client = Client()
    _sign_in(client, org.dev_a)
    _age_session(client, started_ago=700, seen_ago=599)
    assert client.get(reverse("home")).status_code == 200  # just within the idle limit
    _age_session(client, started_ago=1400, seen_ago=601)
    assert client.get(reverse("home")).status_code == 302
    assert client.get(reverse("me")).status_code in (401, 403)
    event = AuditEvent.objects.get(action="auth.session_expired")
    assert event.data == {"reason": "idle"}


def test_session_ends_at_the_absolute_limit_even_when_active(org: Org, settings: Any) -> None:
    settings.SESSION_MAX_AGE_SECONDS = 3600
    client = Client()
    _sign_in(client, org.dev_a)
    _age_session(client, started_ago=3601, seen_ago=5)
    assert client.get(reverse("home")).status_code == 302
    assert AuditEvent.objects.get(action="auth.session_expired").data == {"reason": "max_age"}


def test_activity_keeps_an_idle_clock_running(org: Org, settings: Any) -> None:
    settings.SESSION_IDLE_TIMEOUT_SECONDS = 600
    client = Client()
    _sign_in(client, org.dev_a)
    _age_session(client, started_ago=500, seen_ago=500)
    client.get(reverse("home"))
    assert int(time.time()) - client.session[SESSION_SEEN_KEY] < 5


def test_deactivation_deletes_tokens_and_sessions(org: Org) -> None:
    web = Client()
    _sign_in(web, org.dev_a)
    api = api_client(org.dev_a)
    assert api.get(reverse("me")).status_code == 200
    other = api_client(org.dev_b)
    org.dev_a.is_active = False
    org.dev_a.save()
    assert not AuthToken.objects.filter(user=org.dev_a).exists()
    assert api.get(reverse("me")).status_code == 401
    assert web.get(reverse("home")).status_code == 302
    org.dev_a.is_active = True
    org.dev_a.save()
    assert api.get(reverse("me")).status_code == 401  # re-activation does not revive them
    assert web.get(reverse("home")).status_code == 302
    assert other.get(reverse("me")).status_code == 200  # nobody else is signed out
    event = AuditEvent.objects.get(action="auth.user_deactivated")
    assert event.data == {"tokens_revoked": 1, "sessions_ended": 1}


def test_api_logout_revokes_the_token(org: Org) -> None:
    client = api_client(org.dev_a)
    assert client.post(reverse("auth-logout")).status_code == 204
    assert client.get(reverse("me")).status_code == 401
    assert AuditEvent.objects.filter(action="auth.logout", data__via="token").exists()


def _raw_token(user: Any) -> str:
    _, token = AuthToken.objects.create(user=user)
    return str(token)


@pytest.mark.parametrize("where", ["query", "cookie", "body", "bearer-in-query"])
def test_tokens_are_accepted_only_in_the_authorization_header(org: Org, where: str) -> None:
    token = _raw_token(org.dev_a)
    client = APIClient()
    url = reverse("me")
    if where == "query":
        response = client.get(url, {"token": token})
    elif where == "bearer-in-query":
        response = client.get(url, {"access_token": token, "auth_token": token})
    elif where == "cookie":
        client.cookies["token"] = token
        client.cookies["Authorization"] = f"Token {token}"
        response = client.get(url)
    else:
        response = client.generic("GET", url, f'{{"token": "{token}"}}', "application/json")
    assert response.status_code == 401, (where, response.status_code)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.get(url).status_code == 200


def test_a_nul_character_in_a_username_reference_is_a_400_not_a_500(org: Org) -> None:
    """Found by the fuzzer on PostgreSQL: a NUL in `user` reached the database."""
    body = {"user": "dev\x00_a", "team": org.team_a.pk, "role": "developer"}
    response = api_client(org.lead_a).post(reverse("membership-list"), body, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["fields"]["user"]
