"""Sign-ins and sign-outs go to the audit trail; deactivating a user ends sessions and tokens."""

from __future__ import annotations

import time
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_in, user_logged_out, user_login_failed
from django.contrib.sessions.models import Session
from django.db.models.signals import post_save, pre_save
from django.dispatch import receiver
from django.http import HttpRequest
from django.utils import timezone
from knox.models import AuthToken

from tenants.middleware import SESSION_SEEN_KEY, SESSION_STARTED_KEY
from tenants.services.organisation import record_audit_event

User = get_user_model()


def _client_address(request: HttpRequest | None) -> str:
    return str(request.META.get("REMOTE_ADDR", "")) if request is not None else ""


@receiver(user_logged_in, dispatch_uid="tenants.audit_login")
def audit_login(sender: Any, request: HttpRequest | None, user: Any, **kwargs: Any) -> None:
    """A successful sign-in starts the idle and absolute session clocks."""
    if request is not None and hasattr(request, "session"):
        now = int(time.time())
        request.session[SESSION_STARTED_KEY] = now
        request.session[SESSION_SEEN_KEY] = now
    record_audit_event(
        actor=user, action="auth.login", target=user, message=_client_address(request)
    )


@receiver(user_logged_out, dispatch_uid="tenants.audit_logout")
def audit_logout(sender: Any, request: HttpRequest | None, user: Any, **kwargs: Any) -> None:
    if user is None:
        return  # logging out an anonymous session: nothing happened
    via = "token" if request is not None and request.path.startswith("/api/") else "session"
    record_audit_event(
        actor=user,
        action="auth.logout",
        target=user,
        message=_client_address(request),
        data={"via": via},
    )


@receiver(user_login_failed, dispatch_uid="tenants.audit_login_failed")
def audit_login_failed(
    sender: Any, credentials: dict[str, Any], request: HttpRequest | None = None, **kwargs: Any
) -> None:
    """Only the username is kept (Django already masks the password in `credentials`)."""
    username = str(credentials.get("username", ""))[:150]
    record_audit_event(
        actor=None,
        action="auth.login_failed",
        target=User(username=username),
        message=_client_address(request),
        data={"username": username},
    )


@receiver(pre_save, sender=User, dispatch_uid="tenants.note_deactivation")
def note_deactivation(sender: Any, instance: Any, **kwargs: Any) -> None:
    """Note on the user object whether this save turns an active user inactive.

    Read before the row changes; `end_sessions_of_deactivated_users` acts on it after the save.
    """
    instance.portal_deactivating = bool(
        instance.pk is not None
        and not instance.is_active
        and User.objects.filter(pk=instance.pk, is_active=True).exists()
    )


@receiver(post_save, sender=User, dispatch_uid="tenants.end_sessions_of_deactivated_users")
def end_sessions_of_deactivated_users(sender: Any, instance: Any, **kwargs: Any) -> None:
    """Delete every API token and session of a user who was just deactivated.

    Django and knox already refuse an inactive user, but deleting the credentials makes the
    refusal survive a later re-activation: the person signs in again instead of old tokens
    coming back to life. Sessions are found by decoding the live ones (deactivation is rare).
    """
    if not getattr(instance, "portal_deactivating", False):
        return
    _, deleted = AuthToken.objects.filter(user=instance).delete()
    revoked_tokens = deleted.get("knox.AuthToken", 0)
    user_id = str(instance.pk)
    session_keys = [
        session.session_key
        for session in Session.objects.filter(expire_date__gt=timezone.now()).iterator()
        if str(session.get_decoded().get("_auth_user_id")) == user_id
    ]
    Session.objects.filter(session_key__in=session_keys).delete()
    record_audit_event(
        actor=None,
        action="auth.user_deactivated",
        target=instance,
        data={"tokens_revoked": revoked_tokens, "sessions_ended": len(session_keys)},
    )
