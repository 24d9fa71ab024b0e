"""Reads of the organisation."""

from __future__ import annotations

from typing import Any

from tenants.choices import Role
from tenants.models import Membership, scope_of
from tenants.scope import Scope


def user_roles(*, user: Any) -> list[dict[str, Any]]:
    """Every role the user holds, with its team where the role is per team."""
    memberships = Membership.objects.filter(user_id=user.pk).select_related("team")
    roles = [
        {
            "role": m.role,
            "team": {"id": m.team.pk, "name": m.team.name, "slug": m.team.slug} if m.team else None,
        }
        for m in memberships
    ]
    if user.is_superuser and not any(r["role"] == Role.PLATFORM_ADMIN for r in roles):
        roles.append({"role": Role.PLATFORM_ADMIN.value, "team": None})
    return roles


def primary_role(*, user: Any) -> str | None:
    """The role whose home page the user lands on: the broadest one they hold."""
    scope: Scope = scope_of(user)
    if scope.is_platform_admin:
        return Role.PLATFORM_ADMIN
    if scope.is_finance:
        return Role.FINANCE
    if scope.lead_team_ids:
        return Role.TEAM_LEAD
    if scope.team_ids:
        return Role.DEVELOPER
    return None
