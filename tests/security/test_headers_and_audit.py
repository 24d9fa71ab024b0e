"""Response headers (CSP with nonces, frame denial, HSTS), error pages, the append-only audit
table and the web tier's distance from the cluster client."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.db import DatabaseError, connection, transaction
from django.test import Client
from django.urls import reverse

from tenants.models import AuditEvent
from tenants.services.organisation import record_audit_event
from tests.security.isolation import collection_routes
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db

ROOT = Path(django_settings.BASE_DIR)
SCRIPT_TAG = re.compile(r"<script\b([^>]*)>", re.IGNORECASE)


def _policy(response: Any) -> dict[str, str]:
    header = response["Content-Security-Policy"]
    return dict(part.strip().split(" ", 1) for part in header.split(";") if " " in part.strip())


def test_every_page_carries_the_csp_and_each_script_the_nonce(org: Org) -> None:
    """Every web page each role can open: scripts load from us or carry this response's nonce."""
    pages = 0
    for persona in (org.dev_a, org.lead_a, org.finance, org.admin):
        client = Client()
        client.force_login(persona)
        for route in collection_routes():
            if route.is_api:
                continue
            response = client.get(reverse(route.name))
            if response.status_code != 200 or "html" not in response["Content-Type"]:
                continue
            policy = _policy(response)
            script_src = policy["script-src"]
            assert "'unsafe-inline'" not in script_src and "'unsafe-eval'" not in script_src
            # django-csp puts a nonce in the header only when the page used one: then none runs.
            found = re.search(r"'nonce-([^']+)'", script_src)
            nonce = found.group(1) if found else "no nonce on this page"
            for attributes in SCRIPT_TAG.findall(response.content.decode()):
                if 'type="application/json"' in attributes:
                    continue  # json_script data blocks never run
                if "src=" not in attributes or "nonce=" in attributes:
                    assert f'nonce="{nonce}"' in attributes, (route.name, attributes)
            assert policy["frame-ancestors"] == "'none'"
            assert policy["object-src"] == "'none'"
            assert response["X-Frame-Options"] == "DENY"
            assert response["X-Content-Type-Options"] == "nosniff"
            assert response["Referrer-Policy"] == "same-origin"
            pages += 1
    print(f"\nCSP checked on {pages} pages")
    assert pages >= 15


def test_no_template_has_an_inline_script_without_the_nonce_or_an_inline_handler() -> None:
    for template in (ROOT / "templates").rglob("*.html"):
        text = template.read_text()
        for attributes in SCRIPT_TAG.findall(text):
            assert "src=" in attributes or "csp_nonce" in attributes, (template, attributes)
        assert not re.search(r"\son[a-z]+=", text), f"{template}: inline event handler"


def test_the_nonce_differs_per_response(org: Org) -> None:
    client = Client()
    client.force_login(org.dev_a)
    first = _policy(client.get(reverse("home")))["script-src"]
    second = _policy(client.get(reverse("home")))["script-src"]
    assert first != second


def test_hsts_is_sent_over_https_in_production(org: Org, settings: Any) -> None:
    settings.SECURE_HSTS_SECONDS = 31536000
    settings.SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    response = Client().get(reverse("login"), secure=True)
    assert response["Strict-Transport-Security"] == "max-age=31536000; includeSubDomains"


def test_check_deploy_is_clean_under_production_settings() -> None:
    env = {
        **os.environ,
        "DEBUG": "false",
        "SECRET_KEY": "check-deploy-" + "x" * 60,
        "ALLOWED_HOSTS": "portal.example.com",
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("path", ["/boom/", "/api/v1/boom/"])
def test_error_pages_show_no_stack_trace(path: str, settings: Any) -> None:
    settings.DEBUG = False
    settings.ROOT_URLCONF = "tests.security.urls_boom"
    client = Client(raise_request_exception=False)
    response = client.get(path)
    assert response.status_code == 500
    body = response.content.decode()
    for leak in ("Traceback", "secret-internal-detail", "postgres://", "RuntimeError", ".py"):
        assert leak not in body, leak
    missing = client.get(path + "nothing-here/")
    assert missing.status_code == 404
    assert "Traceback" not in missing.content.decode()
    assert "urlpatterns" not in missing.content.decode()


# --- Audit ------------------------------------------------------------------------------------


def test_denied_accesses_are_audited(org: Org) -> None:
    client = api_client(org.dev_a)
    assert client.post(reverse("team-list"), {"name": "x", "slug": "x"}).status_code == 403
    assert client.get(reverse("team-detail", kwargs={"pk": org.team_b.pk})).status_code == 404
    assert client.get("/api/v1/no-such-thing/").status_code == 404
    denied = AuditEvent.objects.filter(actor=org.dev_a, action="access.denied").get()
    assert denied.data["status"] == 403 and denied.message == "POST /api/v1/teams/"
    probed = AuditEvent.objects.filter(actor=org.dev_a, action="access.not_found").get()
    assert probed.data["route"] == "team-detail"  # the unknown path is noise and not kept


def test_token_creation_and_revocation_are_audited(org: Org) -> None:
    client = Client()
    client.force_login(org.dev_a)
    client.post(reverse("api-tokens"))
    from knox.models import AuthToken

    key = AuthToken.objects.get(user=org.dev_a).token_key
    client.post(reverse("api-token-revoke", kwargs={"token_key": key}))
    actions = set(AuditEvent.objects.filter(actor=org.dev_a).values_list("action", flat=True))
    assert {"auth.token_created", "auth.token_revoked"} <= actions


def test_audit_events_refuse_change_and_delete_in_the_model(org: Org) -> None:
    from django.core.exceptions import ValidationError

    event = record_audit_event(actor=org.dev_a, action="test.event", target=org.team_a)
    event.message = "rewritten"
    with pytest.raises(ValidationError):
        event.save()
    with pytest.raises(ValidationError):
        event.delete()


@pytest.mark.skipif(
    connection.vendor != "postgresql",
    reason="the append-only trigger is PostgreSQL's (migration tenants 0002); SQLite is the demo",
)
def test_postgresql_refuses_update_and_delete_of_audit_rows(org: Org) -> None:
    event = record_audit_event(
        actor=org.dev_a, action="test.event", target=org.team_a, team=org.team_a
    )
    for attempt in (
        lambda: AuditEvent.objects.filter(pk=event.pk).update(message="rewritten"),
        lambda: AuditEvent.objects.filter(pk=event.pk).update(actor=org.lead_a),
        lambda: AuditEvent.objects.filter(pk=event.pk).delete(),
    ):
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
            attempt()
    org.dev_a.delete()  # on_delete=SET_NULL clean-up is the one update allowed
    event.refresh_from_db()
    assert event.actor is None and event.action == "test.event"


# --- The web tier and the cluster -------------------------------------------------------------

WEB_TIER_PROBE = """
import os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
from portal.wsgi import application
from django.test import Client
from django.urls import get_resolver
get_resolver().url_patterns  # imports every view module the web tier serves
client = Client()
for path in ("/healthz", "/login/", "/api/v1/me/", "/requests/", "/api/schema/"):
    client.get(path)
loaded = sorted(name for name in sys.modules if name.split(".")[0] == "kubernetes")
print("LOADED", loaded)
"""


def test_web_tier_never_loads_the_kubernetes_client() -> None:
    """Even configured for the real cluster, the web process never imports the client."""
    env = {**os.environ, "CLUSTER_BACKEND": "kubernetes", "KUBECONFIG": "/nonexistent"}
    result = subprocess.run(
        [sys.executable, "-c", WEB_TIER_PROBE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "LOADED" in result.stdout, result.stderr[-2000:]
    assert "LOADED []" in result.stdout, result.stdout
