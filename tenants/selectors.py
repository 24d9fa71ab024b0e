"""Reads of the organisation."""

from __future__ import annotations

from datetime import date
from typing import Any

from django.db.models import QuerySet
from django.utils.dateparse import parse_date

from tenants.choices import Role
from tenants.models import AuditEvent, Membership, Webhook, scope_of
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


def filter_audit_events(
    events: QuerySet[AuditEvent],
    *,
    action: str = "",
    actor: str = "",
    target_type: str = "",
    target_id: str = "",
    since: str = "",
    until: str = "",
) -> QuerySet[AuditEvent]:
    """The audit page's filters: action prefix, actor's username ("system" for none), object
    (type and id) and a date range in the portal's time zone, both days included.

    A date that does not parse is ignored rather than refused: the page shows everything.
    """
    if action:
        events = events.filter(action__startswith=action)
    if actor == "system":
        events = events.filter(actor__isnull=True)
    elif actor:
        events = events.filter(actor__username=actor)
    if target_type:
        events = events.filter(target_type=target_type)
    if target_id:
        events = events.filter(target_id=target_id)
    for value, lookup in ((since, "occurred_at__date__gte"), (until, "occurred_at__date__lte")):
        day = _day(value)
        if day is not None:
            events = events.filter(**{lookup: day})
    return events


def _day(value: str) -> date | None:
    try:
        return parse_date(value) if value else None
    except ValueError:
        return None


def active_webhook_ids() -> list[int]:
    """The webhooks that hear every notice now."""
    return list(Webhook.objects.filter(is_active=True).values_list("pk", flat=True))


def active_webhook(*, webhook_id: int) -> Webhook | None:
    return Webhook.objects.filter(pk=webhook_id, is_active=True).first()
