from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse
from knox.models import AuthToken

from tests.support.cross_tenant import covers
from tests.support.personas import Org

pytestmark = pytest.mark.django_db


def login(user: object, username: str) -> Client:
    client = Client()
    assert client.login(username=username, password=f"pw-{username}")
    return client


def test_anonymous_home_redirects_to_login(org: Org) -> None:
    response = Client().get(reverse("home"))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_login_page_renders_and_rejects_bad_password(org: Org) -> None:
    client = Client()
    assert b"Sign in to GPU Portal" in client.get(reverse("login")).content
    response = client.post(reverse("login"), {"username": "dev_a", "password": "wrong"})
    assert response.status_code == 200
    assert "didn't match" in response.content.decode()


def test_login_rotates_the_session(org: Org) -> None:
    client = Client()
    client.get(reverse("login"))
    before = client.cookies.get("sessionid")
    client.post(reverse("login"), {"username": "dev_a", "password": "pw-dev_a"})
    assert client.cookies["sessionid"].value != (before.value if before else None)


@pytest.mark.parametrize(
    ("username", "heading"),
    [
        ("dev_a", "My GPU work"),
        ("lead_a", "Team overview"),
        ("finance", "GPU costs"),
        ("admin", "Platform administration"),
        ("nobody", "Welcome"),
    ],
)
def test_each_role_lands_on_its_home_page(org: Org, username: str, heading: str) -> None:
    response = login(org, username).get(reverse("home"))
    assert response.status_code == 200
    assert heading in response.content.decode()


def test_home_shows_only_own_team(org: Org) -> None:
    page = login(org, "dev_a").get(reverse("home")).content.decode()
    assert "Team A" in page
    assert "Team B" not in page
    assert "gpu-team-b-b-one" not in page


def test_administration_link_shows_only_to_staff_who_can_open_it(org: Org) -> None:
    """The Django admin opens for staff only: a platform admin who is not staff gets no link."""
    assert "Administration" not in login(org, "admin").get(reverse("home")).content.decode()
    assert "Administration" not in login(org, "dev_a").get(reverse("home")).content.decode()
    org.admin.is_staff = org.admin.is_superuser = True
    org.admin.save()
    assert "Administration" in login(org, "admin").get(reverse("home")).content.decode()


def test_token_page_creates_token_shown_once_via_htmx(org: Org) -> None:
    client = login(org, "dev_a")
    response = client.post(reverse("api-tokens"), HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    assert "<html" not in response.content.decode()  # a fragment, swapped in place
    assert AuthToken.objects.filter(user=org.dev_a).count() == 1
    assert 'data-testid="new-token"' in response.content.decode()
    assert 'data-testid="new-token"' not in client.get(reverse("api-tokens")).content.decode()


@covers("api-token-revoke")
def test_user_cannot_revoke_someone_elses_token(org: Org) -> None:
    victim, _ = AuthToken.objects.create(user=org.dev_b)
    client = login(org, "dev_a")
    response = client.post(reverse("api-token-revoke", kwargs={"token_key": victim.token_key}))
    assert response.status_code == 404
    assert AuthToken.objects.filter(user=org.dev_b).exists()


def test_user_revokes_own_token(org: Org) -> None:
    token, _ = AuthToken.objects.create(user=org.dev_a)
    client = login(org, "dev_a")
    response = client.post(
        reverse("api-token-revoke", kwargs={"token_key": token.token_key}), HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 200
    assert not AuthToken.objects.filter(user=org.dev_a).exists()


def test_token_revoke_needs_post_and_csrf(org: Org) -> None:
    token, _ = AuthToken.objects.create(user=org.dev_a)
    client = Client(enforce_csrf_checks=True)
    client.login(username="dev_a", password="pw-dev_a")
    url = reverse("api-token-revoke", kwargs={"token_key": token.token_key})
    assert client.get(url).status_code == 405
    assert client.post(url).status_code == 403
    assert AuthToken.objects.filter(user=org.dev_a).exists()


def test_logout_is_a_post_and_ends_the_session(org: Org) -> None:
    client = login(org, "dev_a")
    assert client.post(reverse("logout")).status_code == 302
    assert client.get(reverse("home")).status_code == 302


def test_api_docs_and_schema_are_served_without_cdn(org: Org) -> None:
    client = login(org, "dev_a")
    docs = client.get(reverse("api-docs")).content.decode()
    assert "cdn" not in docs.lower()
    assert "swagger-ui" in docs
    schema = client.get(reverse("schema"), HTTP_ACCEPT="application/json").json()
    assert "/api/v1/teams/" in schema["paths"]
    assert "/api/v1/auth/token/" in schema["paths"]
