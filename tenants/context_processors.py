"""Template context: the signed-in user's role and unread notifications, for the navigation."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from tenants.models import scope_of
from tenants.selectors import primary_role
from tenants.services.notifications import unread_notification_count


def roles(request: HttpRequest) -> dict[str, Any]:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {
        "portal_scope": scope_of(user),
        "portal_role": primary_role(user=user),
        "unread_notifications": unread_notification_count(user=user),
    }


def csp_nonce(request: HttpRequest) -> dict[str, Any]:
    """`csp_nonce` for templates and for django-htmx's `{% htmx_script %}` (reads that name)."""
    return {"csp_nonce": getattr(request, "csp_nonce", "")}
