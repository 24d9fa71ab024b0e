"""Single sign-on against a stub identity provider that signs real RS256 ID tokens: accounts come
from the claims, memberships and roles follow the provider's groups, a forged token is refused."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import jwt
import pytest
import requests
from cryptography.hazmat.primitives.asymmetric import rsa
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command
from django.http import HttpResponse
from django.test import Client
from django.urls import include, path

from tenants.choices import Role
from tenants.models import AuditEvent, Membership, OidcIdentity, Team
from tenants.services.identity import GroupGrant, parse_group_map

# The portal's routes with single sign-on's: settings switch it on at import time from the
# environment (checked in a subprocess below), so the flow tests serve this URL configuration.
urlpatterns = [
    path("oidc/", include("mozilla_django_oidc.urls")),
    path("", include("portal.urls")),
]

CLIENT_ID = "gpu-portal"
CLIENT_SECRET = "from-the-vault"
GROUP_MAP = (
    "gpu-vision-leads=vision:team_lead,gpu-vision-devs=vision:developer,"
    "gpu-speech-devs=speech:developer,gpu-admins=platform_admin,gpu-finance=finance"
)


class StubIdentityProvider:
    """A tiny OpenID provider on a local port: authorize, token, userinfo and JWKS endpoints.

    `claims` are what the next sign-in gets; `signing_key` signs the ID tokens, while the JWKS
    endpoint always publishes the public half of `key`.
    """

    kid = "stub-key-1"

    def __init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.signing_key = self.key
        self.claims: dict[str, Any] = {}
        self.codes: dict[str, dict[str, Any]] = {}
        self.access_tokens: dict[str, dict[str, Any]] = {}
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _ProviderHandler)
        self.server.provider = self  # type: ignore[attr-defined]
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def authorize(self, query: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        if query.get("client_id") != CLIENT_ID or query.get("response_type") != "code":
            return 400, {}, b"unknown client"
        code = secrets.token_urlsafe(16)
        self.codes[code] = {
            "nonce": query.get("nonce"),
            "redirect_uri": query["redirect_uri"],
            "claims": dict(self.claims),
        }
        target = f"{query['redirect_uri']}?{urlencode({'code': code, 'state': query['state']})}"
        return 302, {"Location": target}, b""

    def token(self, form: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        grant = self.codes.pop(form.get("code", ""), None)
        if (
            grant is None
            or form.get("grant_type") != "authorization_code"
            or form.get("client_id") != CLIENT_ID
            or form.get("client_secret") != CLIENT_SECRET
            or form.get("redirect_uri") != grant["redirect_uri"]
        ):
            return 400, {}, json.dumps({"error": "invalid_grant"}).encode()
        now = int(time.time())
        claims = grant["claims"]
        id_token = jwt.encode(
            {
                "iss": self.url,
                "sub": claims.get("sub", claims.get("preferred_username", "")),
                "aud": CLIENT_ID,
                "iat": now,
                "exp": now + 300,
                "nonce": grant["nonce"],
            },
            self.signing_key,
            algorithm="RS256",
            headers={"kid": self.kid},
        )
        access_token = secrets.token_urlsafe(16)
        self.access_tokens[access_token] = claims
        body = {"access_token": access_token, "token_type": "Bearer", "id_token": id_token}
        return 200, {"Content-Type": "application/json"}, json.dumps(body).encode()

    def userinfo(self, authorization: str) -> tuple[int, dict[str, str], bytes]:
        claims = self.access_tokens.get(authorization.removeprefix("Bearer "))
        if claims is None:
            return 401, {}, b""
        return 200, {"Content-Type": "application/json"}, json.dumps(claims).encode()

    def jwks(self) -> tuple[int, dict[str, str], bytes]:
        public = jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key(), as_dict=True)
        keys = {"keys": [{**public, "kid": self.kid, "alg": "RS256", "use": "sig"}]}
        return 200, {"Content-Type": "application/json"}, json.dumps(keys).encode()


class _ProviderHandler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        provider: StubIdentityProvider = self.server.provider  # type: ignore[attr-defined]
        url = urlsplit(self.path)
        query = {name: values[0] for name, values in parse_qs(url.query).items()}
        if url.path == "/authorize":
            self._answer(*provider.authorize(query))
        elif url.path == "/userinfo":
            self._answer(*provider.userinfo(self.headers.get("Authorization", "")))
        elif url.path == "/jwks":
            self._answer(*provider.jwks())
        else:
            self._answer(404, {}, b"")

    def do_POST(self) -> None:
        provider: StubIdentityProvider = self.server.provider  # type: ignore[attr-defined]
        body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
        form = {name: values[0] for name, values in parse_qs(body).items()}
        if urlsplit(self.path).path == "/token":
            self._answer(*provider.token(form))
        else:
            self._answer(404, {}, b"")

    def _answer(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the test output is for the assertions."""


@pytest.fixture(scope="module")
def provider() -> Iterator[StubIdentityProvider]:
    stub = StubIdentityProvider()
    stub.thread.start()
    yield stub
    stub.server.shutdown()
    stub.server.server_close()


@pytest.fixture
def sso(settings: Any, provider: StubIdentityProvider, db: None) -> StubIdentityProvider:
    """Single sign-on switched on against the stub, with the Vision and Speech teams."""
    provider.signing_key = provider.key
    settings.ROOT_URLCONF = __name__
    settings.OIDC_ENABLED = True
    settings.AUTHENTICATION_BACKENDS = [
        "django.contrib.auth.backends.ModelBackend",
        "tenants.oidc.PortalOIDCBackend",
    ]
    settings.OIDC_RP_CLIENT_ID = CLIENT_ID
    settings.OIDC_RP_CLIENT_SECRET = CLIENT_SECRET
    settings.OIDC_RP_SIGN_ALGO = "RS256"
    settings.OIDC_RP_SCOPES = "openid email profile"
    settings.OIDC_OP_AUTHORIZATION_ENDPOINT = f"{provider.url}/authorize"
    settings.OIDC_OP_TOKEN_ENDPOINT = f"{provider.url}/token"
    settings.OIDC_OP_USER_ENDPOINT = f"{provider.url}/userinfo"
    settings.OIDC_OP_JWKS_ENDPOINT = f"{provider.url}/jwks"
    settings.OIDC_GROUP_MAP = GROUP_MAP
    settings.OIDC_GROUPS_CLAIM = "groups"
    settings.LOGIN_REDIRECT_URL_FAILURE = "/login/"
    Team.objects.create(name="Vision", slug="vision")
    Team.objects.create(name="Speech", slug="speech")
    return provider


def sign_in(client: Client, provider: StubIdentityProvider, **claims: Any) -> HttpResponse:
    """The browser's round trip: portal → provider's authorize page → portal's callback."""
    provider.claims = {"sub": f"id-{claims['preferred_username']}", **claims}
    start = client.get("/oidc/authenticate/")
    assert start.status_code == 302
    assert start["Location"].startswith(f"{provider.url}/authorize?")
    at_provider = requests.get(start["Location"], allow_redirects=False, timeout=10)
    assert at_provider.status_code == 302
    callback = urlsplit(at_provider.headers["Location"])
    assert callback.path == "/oidc/callback/"
    return client.get(f"{callback.path}?{callback.query}")  # type: ignore[return-value]


def roles_of(username: str) -> set[tuple[str | None, str]]:
    return set(Membership.objects.filter(user__username=username).values_list("team__slug", "role"))


def sync_events(username: str) -> list[tuple[str, str | None, dict[str, Any]]]:
    events = AuditEvent.objects.filter(
        data__source="identity_provider", data__user=username, action__startswith="membership."
    ).order_by("id")
    return [(event.action, event.team.slug if event.team else None, event.data) for event in events]


def signed_in_as(client: Client) -> str | None:
    user_id = client.session.get("_auth_user_id")
    if user_id is None:
        return None
    return str(get_user_model().objects.get(pk=user_id).get_username())


def test_first_sign_in_creates_the_account_and_the_memberships_its_groups_map_to(
    sso: StubIdentityProvider,
) -> None:
    response = sign_in(
        Client(),
        sso,
        preferred_username="erin",
        email="erin@example.com",
        given_name="Erin",
        family_name="Example",
        groups=["gpu-vision-devs", "gpu-vision-leads", "gpu-finance", "staff-all"],
    )

    assert response.status_code == 302
    assert response["Location"] == "/"
    erin = get_user_model().objects.get(username="erin")
    assert (erin.email, erin.first_name, erin.last_name) == ("erin@example.com", "Erin", "Example")
    assert not erin.has_usable_password()
    # Lead and developer of Vision: the stronger role; the unmapped group gives nothing.
    assert roles_of("erin") == {("vision", Role.TEAM_LEAD), (None, Role.FINANCE)}
    assert [(action, team) for action, team, _ in sync_events("erin")] == [
        ("membership.created", "vision"),
        ("membership.created", None),
    ]
    assert AuditEvent.objects.filter(action="user.created", data__user="erin").count() == 1
    assert AuditEvent.objects.filter(action="auth.login", actor=erin).count() == 1


def test_the_session_signed_in_through_the_provider_sees_the_portal_as_its_role(
    sso: StubIdentityProvider,
) -> None:
    client = Client()
    sign_in(client, sso, preferred_username="erin", groups=["gpu-vision-leads"])

    assert signed_in_as(client) == "erin"
    teams = client.get("/api/v1/teams/")
    assert teams.status_code == 200
    assert [team["slug"] for team in teams.json()["results"]] == ["vision"]


def test_next_sign_in_changes_the_role_and_removes_memberships_whose_group_is_gone(
    sso: StubIdentityProvider,
) -> None:
    sign_in(Client(), sso, preferred_username="erin", groups=["gpu-vision-devs", "gpu-speech-devs"])
    assert roles_of("erin") == {("vision", Role.DEVELOPER), ("speech", Role.DEVELOPER)}

    client = Client()
    sign_in(
        client,
        sso,
        preferred_username="erin",
        email="erin@new.example.com",
        groups=["gpu-vision-leads", "gpu-admins"],
    )

    assert signed_in_as(client) == "erin"
    assert roles_of("erin") == {("vision", Role.TEAM_LEAD), (None, Role.PLATFORM_ADMIN)}
    assert get_user_model().objects.get(username="erin").email == "erin@new.example.com"
    events = {(action, team): data for action, team, data in sync_events("erin")[2:]}
    assert events.keys() == {
        ("membership.changed", "vision"),
        ("membership.deleted", "speech"),
        ("membership.created", None),
    }
    changed = events["membership.changed", "vision"]
    assert changed["changes"] == {"role": [Role.DEVELOPER, Role.TEAM_LEAD]}
    assert all(
        event.actor is None for event in AuditEvent.objects.filter(data__source="identity_provider")
    )


def test_groups_that_map_to_nothing_leave_no_membership_in_mapped_teams_or_roles(
    sso: StubIdentityProvider,
) -> None:
    sign_in(Client(), sso, preferred_username="erin", groups=["gpu-speech-devs", "gpu-admins"])
    # A team the map does not name is managed in the portal and stays as it is.
    audio = Team.objects.create(name="Audio", slug="audio")
    erin = get_user_model().objects.get(username="erin")
    Membership.objects.create(user=erin, team=audio, role=Role.DEVELOPER)

    client = Client()
    sign_in(client, sso, preferred_username="erin", groups=["staff-all"])

    assert signed_in_as(client) == "erin"
    assert roles_of("erin") == {("audio", Role.DEVELOPER)}
    assert [action for action, _, _ in sync_events("erin")][-2:] == [
        "membership.deleted",
        "membership.deleted",
    ]

    sign_in(Client(), sso, preferred_username="erin")  # no groups claim at all
    assert roles_of("erin") == {("audio", Role.DEVELOPER)}
    assert len(sync_events("erin")) == 4  # nothing left to change, nothing recorded


def test_groups_come_from_the_id_token_when_userinfo_has_none(
    sso: StubIdentityProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = sso.token

    def token_with_groups(form: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        grant = sso.codes[form["code"]]
        groups = grant["claims"].pop("groups")
        status, headers, body = original(form)
        answer = json.loads(body)
        claims = jwt.decode(answer["id_token"], options={"verify_signature": False})
        answer["id_token"] = jwt.encode(
            {**claims, "groups": groups}, sso.key, algorithm="RS256", headers={"kid": sso.kid}
        )
        return status, headers, json.dumps(answer).encode()

    monkeypatch.setattr(sso, "token", token_with_groups)
    sign_in(Client(), sso, preferred_username="erin", groups=["gpu-speech-devs"])

    assert roles_of("erin") == {("speech", Role.DEVELOPER)}


def test_an_id_token_with_a_bad_signature_is_refused(sso: StubIdentityProvider) -> None:
    sso.signing_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    client = Client()

    response = sign_in(client, sso, preferred_username="mallory", groups=["gpu-admins"])

    assert response.status_code == 302
    assert response["Location"] == "/login/"
    assert signed_in_as(client) is None
    assert not get_user_model().objects.filter(username="mallory").exists()
    assert not Membership.objects.exists()
    assert AuditEvent.objects.filter(action="auth.login_failed").count() == 1


def test_a_local_superuser_cannot_be_taken_over_through_the_provider(
    sso: StubIdentityProvider,
) -> None:
    get_user_model().objects.create_superuser("root", "root@example.com", "pw-root")
    client = Client()

    response = sign_in(client, sso, preferred_username="root", groups=["gpu-vision-devs"])

    assert response["Location"] == "/login/"
    assert signed_in_as(client) is None
    assert roles_of("root") == set()


def test_a_provider_user_named_like_a_local_account_cannot_take_it_over(
    sso: StubIdentityProvider,
) -> None:
    alice = get_user_model().objects.create_user("alice", password="pw-alice")
    Membership.objects.create(user=alice, team=Team.objects.get(slug="vision"), role=Role.DEVELOPER)

    for name in ("alice", "Alice"):
        client = Client()
        response = sign_in(
            client, sso, preferred_username=name, sub="not-alice", groups=["gpu-admins"]
        )
        assert response["Location"] == "/login/"
        assert signed_in_as(client) is None

    assert list(get_user_model().objects.values_list("username", flat=True)) == ["alice"]
    assert roles_of("alice") == {("vision", Role.DEVELOPER)}  # the provider's groups did nothing
    assert not OidcIdentity.objects.exists()
    refusals = AuditEvent.objects.filter(action="auth.sso_refused")
    assert [event.data["username"] for event in refusals.order_by("id")] == ["alice", "Alice"]
    assert "already exists" in refusals.first().message  # type: ignore[union-attr]
    # Alice herself still signs in with her password.
    assert Client().login(username="alice", password="pw-alice")


def test_a_name_the_provider_gives_to_another_person_does_not_reach_the_first_account(
    sso: StubIdentityProvider,
) -> None:
    first = Client()
    sign_in(first, sso, preferred_username="erin", sub="person-1", groups=["gpu-vision-devs"])
    assert signed_in_as(first) == "erin"

    second = Client()
    response = sign_in(second, sso, preferred_username="erin", sub="person-2")

    assert response["Location"] == "/login/"
    assert signed_in_as(second) is None
    assert OidcIdentity.objects.get().subject == "person-1"


def test_a_returning_subject_whose_username_changed_reaches_its_own_account(
    sso: StubIdentityProvider,
) -> None:
    sign_in(Client(), sso, preferred_username="erin", sub="person-1", groups=["gpu-vision-devs"])
    erin = get_user_model().objects.get(username="erin")

    client = Client()
    sign_in(client, sso, preferred_username="erin.smith", sub="person-1", groups=["gpu-admins"])

    assert signed_in_as(client) == "erin"  # the account keeps the name it was created with
    assert get_user_model().objects.count() == 1
    assert roles_of("erin") == {(None, Role.PLATFORM_ADMIN)}
    identity = OidcIdentity.objects.get(user=erin)
    assert (identity.issuer, identity.subject) == (sso.url, "person-1")
    assert identity.last_login_at is not None


def test_an_operator_links_an_existing_account_to_the_provider_explicitly(
    sso: StubIdentityProvider,
) -> None:
    alice = get_user_model().objects.create_user("alice", password="pw-alice")
    call_command("user_account", "link-oidc", "alice", issuer=sso.url, subject="alice-at-idp")

    client = Client()
    sign_in(client, sso, preferred_username="alice", sub="alice-at-idp", groups=["gpu-finance"])

    assert signed_in_as(client) == "alice"
    assert roles_of("alice") == {(None, Role.FINANCE)}
    linked = AuditEvent.objects.get(action="user.identity_linked")
    assert (linked.target_id, linked.data["subject"]) == (str(alice.pk), "alice-at-idp")
    # Another account cannot be given the same subject.
    get_user_model().objects.create_user("bob")
    with pytest.raises(CommandError, match="linked to another account"):
        call_command("user_account", "link-oidc", "bob", issuer=sso.url, subject="alice-at-idp")
    call_command("user_account", "unlink-oidc", "alice", issuer=sso.url, subject="alice-at-idp")
    refused = Client()
    sign_in(refused, sso, preferred_username="alice", sub="alice-at-idp")
    assert signed_in_as(refused) is None


def test_a_group_map_that_does_not_read_stops_single_sign_on_but_not_password_sign_in(
    sso: StubIdentityProvider, settings: Any
) -> None:
    settings.OIDC_GROUP_MAP = "gpu-vision-leads=vision:boss"
    get_user_model().objects.create_user("alice", password="pw-alice")
    client = Client()

    assert client.post("/login/", {"username": "alice", "password": "pw-alice"}).status_code == 302
    assert signed_in_as(client) == "alice"
    with pytest.raises(ImproperlyConfigured, match="names role 'boss'"):
        sign_in(Client(), sso, preferred_username="erin", groups=["gpu-vision-leads"])


def test_the_login_page_offers_single_sign_on_when_it_is_on(sso: StubIdentityProvider) -> None:
    page = Client().get("/login/")

    assert 'href="/oidc/authenticate/"' in page.content.decode()


@pytest.mark.parametrize(
    "raw",
    [
        "gpu-vision-leads=vision:team_lead, gpu-admins=platform_admin",
        '{"gpu-vision-leads": "vision:team_lead", "gpu-admins": "platform_admin"}',
        '{"gpu-vision-leads": {"team": "vision", "role": "team_lead"},'
        ' "gpu-admins": {"role": "platform_admin"}}',
        {"gpu-vision-leads": "vision:team_lead", "gpu-admins": "platform_admin"},
    ],
)
def test_the_group_map_reads_the_short_syntax_and_json_alike(raw: Any) -> None:
    assert parse_group_map(raw) == {
        "gpu-vision-leads": GroupGrant(role=Role.TEAM_LEAD, team_slug="vision"),
        "gpu-admins": GroupGrant(role=Role.PLATFORM_ADMIN),
    }


@pytest.mark.parametrize(
    ("raw", "complaint"),
    [
        ("gpu-vision-leads", "write group=team-slug:role"),
        ("gpu-vision-leads=vision:boss", "names role 'boss'"),
        ("gpu-vision-leads=team_lead", "without a team"),
        ("gpu-admins=vision:platform_admin", "organisation role platform_admin to a team"),
        ('{"gpu-admins": ', "not valid JSON"),
    ],
)
def test_a_group_map_that_does_not_read_is_a_configuration_error(raw: str, complaint: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=complaint):
        parse_group_map(raw)


def test_the_environment_switches_single_sign_on_on_with_the_group_map() -> None:
    probe = (
        "import django; django.setup(); from django.conf import settings; "
        "from django.urls import reverse; from tenants.oidc import PortalOIDCBackend; "
        "backend = PortalOIDCBackend(); "
        "print(reverse('oidc_authentication_init'), reverse('oidc_authentication_callback'), "
        "settings.AUTHENTICATION_BACKENDS[-1], sorted(backend.group_map), backend.groups_claim)"
    )
    environment = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "OIDC_RP_CLIENT_ID": CLIENT_ID,
        "OIDC_RP_CLIENT_SECRET": CLIENT_SECRET,
        "OIDC_OP_AUTHORIZATION_ENDPOINT": "https://sso.example.com/auth",
        "OIDC_OP_TOKEN_ENDPOINT": "https://sso.example.com/token",
        "OIDC_OP_USER_ENDPOINT": "https://sso.example.com/userinfo",
        "OIDC_OP_JWKS_ENDPOINT": "https://sso.example.com/jwks",
        "OIDC_GROUP_MAP": '{"gpu-vision-leads": "vision:team_lead"}',
        "OIDC_GROUPS_CLAIM": "roles",
    }
    output = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=settings.BASE_DIR,
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()

    assert output.splitlines()[-1] == (
        "/oidc/authenticate/ /oidc/callback/ tenants.oidc.PortalOIDCBackend "
        "['gpu-vision-leads'] roles"
    )
