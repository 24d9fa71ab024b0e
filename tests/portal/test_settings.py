"""Settings come from the environment: production hardening and single sign-on switch on there."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from django.conf import settings

PROBE = (
    "import json, django; from django.conf import settings; django.setup(); "
    "print(json.dumps({'backends': settings.AUTHENTICATION_BACKENDS, "
    "'apps': settings.INSTALLED_APPS, 'hsts': getattr(settings, 'SECURE_HSTS_SECONDS', 0), "
    "'secure_cookie': getattr(settings, 'SESSION_COOKIE_SECURE', False)}))"
)


def settings_with(**env: str) -> dict[str, object]:
    environment = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings", **env}
    output = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=settings.BASE_DIR,
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return dict(json.loads(output.strip().splitlines()[-1]))


def test_single_sign_on_is_off_by_default_and_pluggable() -> None:
    default = settings_with()
    assert "mozilla_django_oidc" not in default["apps"]  # type: ignore[operator]
    enabled = settings_with(
        OIDC_RP_CLIENT_ID="portal",
        OIDC_RP_CLIENT_SECRET="from-the-vault",
        OIDC_OP_AUTHORIZATION_ENDPOINT="https://sso.example.com/auth",
        OIDC_OP_TOKEN_ENDPOINT="https://sso.example.com/token",
        OIDC_OP_USER_ENDPOINT="https://sso.example.com/userinfo",
    )
    assert "mozilla_django_oidc" in enabled["apps"]  # type: ignore[operator]
    assert "tenants.oidc.PortalOIDCBackend" in enabled["backends"]  # type: ignore[operator]


def test_production_settings_turn_on_secure_cookies_and_hsts() -> None:
    production = settings_with(DEBUG="false", SECRET_KEY="x" * 60, ALLOWED_HOSTS="gpu.example.com")
    assert production["secure_cookie"] is True
    assert production["hsts"] == 31536000


def test_production_refuses_to_start_without_a_secret_key() -> None:
    environment = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings", "DEBUG": "false"}
    environment.pop("SECRET_KEY", None)
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=settings.BASE_DIR,
        env=environment,
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0
    assert "SECRET_KEY must be set" in result.stderr
