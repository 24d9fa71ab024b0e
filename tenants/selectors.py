"""Reads of the organisation."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date
from typing import Any

from django.apps import apps
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


@dataclass(frozen=True, slots=True)
class AuditChange:
    """One field an audited edit changed, its values in words."""

    field: str
    old: str
    new: str


@dataclass(frozen=True, slots=True)
class AuditRow:
    """An audit event as the audit page shows it: its object by name and what changed."""

    event: AuditEvent
    object_label: str
    changes: tuple[AuditChange, ...]


def audit_rows(events: Iterable[AuditEvent]) -> list[AuditRow]:
    """The page's events with their objects' names (one query per object type, whatever the
    number of events) and the changed fields of edits, old → new."""
    events = list(events)
    labels = _object_labels(events)
    return [
        AuditRow(e, labels.get((e.target_type, e.target_id), ""), audit_changes(e.data))
        for e in events
    ]


def audit_changes(data: Any) -> tuple[AuditChange, ...]:
    """The fields an event's data says changed: `changes` ({field: [old, new]}), or `before`
    and `after` (two dicts, or two values of the object as a whole)."""
    if not isinstance(data, dict):
        return ()
    pairs: dict[str, tuple[Any, Any]] = {}
    changes = data.get("changes")
    if isinstance(changes, dict):
        pairs = {
            str(name): (value[0], value[1])
            for name, value in changes.items()
            if isinstance(value, list | tuple) and len(value) == 2  # noqa: PLR2004
        }
    elif "before" in data and "after" in data:
        before, after = data["before"], data["after"]
        if isinstance(before, dict) and isinstance(after, dict):
            pairs = {
                str(name): (before.get(name), after.get(name))
                for name in {**before, **after}
                if before.get(name) != after.get(name)
            }
        elif before != after:
            pairs = {"value": (before, after)}
    return tuple(
        AuditChange(name, _in_words(old), _in_words(new))
        for name, (old, new) in pairs.items()
        if old != new
    )


def _in_words(value: Any) -> str:
    if value is None or value == "":
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(_in_words(item) for item in value) or "none"
    return str(value)


def _object_labels(events: list[AuditEvent]) -> dict[tuple[str, str], str]:
    """(target type, id) → the object's name as people know it ("alice", "A100 pool"); objects
    deleted since are left out."""
    wanted: dict[str, set[int]] = {}
    for event in events:
        if event.target_id.isdigit():
            wanted.setdefault(event.target_type, set()).add(int(event.target_id))
    models = {model.__name__: model for model in apps.get_models()}
    labels: dict[tuple[str, str], str] = {}
    for target_type, ids in wanted.items():
        model = models.get(target_type)
        if model is None:
            continue
        for obj in model.objects.filter(pk__in=ids):  # type: ignore[attr-defined]
            name = getattr(obj, "name", None)  # a request's name may be blank: then its number
            labels[(target_type, str(obj.pk))] = name if isinstance(name, str) else str(obj)
    return labels
