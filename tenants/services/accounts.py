"""Accounts: switching one on or off, audited. Django's admin no longer writes users, so this
and the identity links (`tenants.services.identity`) are how an operator changes an account."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from tenants.scope import Actor
from tenants.services.organisation import record_audit_event, require_platform_admin


@transaction.atomic
def set_account_active(*, actor: Actor | None, user: Any, is_active: bool) -> bool:
    """Switch the account on or off; True if it changed.

    `actor` None is an operator at the command line; a person must be a platform admin.
    Deactivating ends every session and API token (`tenants.signals`).
    """
    if actor is not None:
        require_platform_admin(actor, "switch accounts on or off")
    if user.is_active == is_active:
        return False
    user.is_active = is_active
    user.save(update_fields=["is_active"])
    record_audit_event(
        actor=actor,
        action="user.activated" if is_active else "user.deactivated",
        target=user,
        data={"user": user.get_username()},
    )
    return True
