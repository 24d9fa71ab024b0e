"""Reads of the organisation."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date
from typing import Any

from django.apps import apps
from django.core.exceptions import FieldDoesNotExist
from django.db.models import Field, ForeignObjectRel, QuerySet
from django.utils.dateparse import parse_date

from tenants.choices import NotificationChannel, Role
from tenants.models import (
    DEFAULT_EMAIL_TOPICS,
    DEFAULT_IN_APP_TOPICS,
    AuditEvent,
    Membership,
    NotificationSettings,
    Webhook,
    scope_of,
)
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
class NotificationPreferences:
    """Which topics reach one user on each channel, as their settings (or the defaults) say:
    email only when switched on, the webhook only when they named one."""

    in_app: frozenset[str]
    email: frozenset[str]
    webhook: frozenset[str]

    def wants(self, channel: str, topic: str) -> bool:
        topics = {
            NotificationChannel.IN_APP: self.in_app,
            NotificationChannel.EMAIL: self.email,
            NotificationChannel.WEBHOOK: self.webhook,
        }[NotificationChannel(channel)]
        return topic in topics

    @classmethod
    def of(cls, row: NotificationSettings | None) -> NotificationPreferences:
        if row is None:
            return DEFAULT_PREFERENCES
        return cls(
            in_app=frozenset(row.in_app_topics),
            email=frozenset(row.email_topics) if row.email_enabled else frozenset(),
            webhook=frozenset(row.webhook_topics) if row.webhook_url else frozenset(),
        )


DEFAULT_PREFERENCES = NotificationPreferences(
    in_app=frozenset(DEFAULT_IN_APP_TOPICS),
    email=frozenset(DEFAULT_EMAIL_TOPICS),
    webhook=frozenset(),  # no webhook until one is named
)


def notification_preferences(*, user_ids: Iterable[int]) -> dict[int, NotificationPreferences]:
    """Each user's preferences, in one query; the defaults for those who never chose."""
    wanted = {int(pk) for pk in user_ids}
    rows = {
        row.pk: row
        for row in NotificationSettings.objects.filter(user_id__in=wanted).only(
            "user_id",
            "in_app_topics",
            "email_enabled",
            "email_topics",
            "webhook_url",
            "webhook_topics",
        )
    }
    return {pk: NotificationPreferences.of(rows.get(pk)) for pk in wanted}


def notification_settings_of(*, user: Any) -> NotificationSettings:
    """The user's own settings, as stored or (unsaved) the defaults."""
    row = NotificationSettings.objects.visible_to(user).first()
    return row if row is not None else NotificationSettings(user_id=user.pk)


@dataclass(frozen=True, slots=True)
class AuditChange:
    """One field an audited edit changed: its name and values in words."""

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
    """The page's events with their objects' names and the changed fields of edits, old → new,
    in words: a related object by its name, a choice by its label (one query per object type,
    whatever the number of events)."""
    events = list(events)
    models = {model.__name__: model for model in apps.get_models()}
    labels = _object_labels(events, models)
    pairs = [audit_changes(e.data) for e in events]
    fields = [
        {name: _model_field(models.get(e.target_type), name) for name in changed}
        for e, changed in zip(events, pairs, strict=True)
    ]
    names = _related_names(pairs, fields)
    return [
        AuditRow(
            e,
            labels.get((e.target_type, e.target_id), ""),
            tuple(
                AuditChange(
                    _field_words(name, field.get(name)),
                    _in_words(old, field.get(name), names),
                    _in_words(new, field.get(name), names),
                )
                for name, (old, new) in changed.items()
            ),
        )
        for e, changed, field in zip(events, pairs, fields, strict=True)
    ]


def audit_changes(data: Any) -> dict[str, tuple[Any, Any]]:
    """{field: (old, new)} for the fields an event's data says changed: `changes` (or the older
    `changed`) as {field: [old, new]}, or `before` and `after` (two dicts, or two values of the
    object as a whole)."""
    if not isinstance(data, dict):
        return {}
    pairs: dict[str, tuple[Any, Any]] = {}
    changes = data.get("changes", data.get("changed"))
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
    return {name: (old, new) for name, (old, new) in pairs.items() if old != new}


def _model_field(model: Any, name: str) -> Field[Any, Any] | ForeignObjectRel | None:
    if model is None:
        return None
    try:
        return model._meta.get_field(name)
    except FieldDoesNotExist:
        return None


# A field name's unit said as people write it: "limit_gib" → "Limit (GiB)".
FIELD_UNITS = (("_gib", "GiB"), ("_mib", "MiB"), ("_seconds", "seconds"), ("_percent", "%"))


def _field_words(name: str, field: Any) -> str:
    """A changed field's name in words: its model's own verbose name when it has one."""
    words = str(getattr(field, "verbose_name", "") or "")
    if not words or words == name.replace("_", " "):
        words = name.removeprefix("is_")
        for suffix, unit in FIELD_UNITS:
            if words.endswith(suffix):
                words = f"{words.removesuffix(suffix)} ({unit})"
        words = words.replace("_", " ")
    return words[:1].upper() + words[1:]


RelatedNames = dict[tuple[Any, str], str]


def _related_names(
    pairs: list[dict[str, tuple[Any, Any]]], fields: list[dict[str, Any]]
) -> RelatedNames:
    """(related model, pk) → the object's name, for every relation an edit changed."""
    wanted: dict[Any, set[str]] = {}
    for changed, field in zip(pairs, fields, strict=True):
        for name, values in changed.items():
            related = getattr(field.get(name), "related_model", None)
            if related is None:
                continue
            for value in values:
                for pk in value if isinstance(value, list | tuple) else [value]:
                    if pk is not None:
                        wanted.setdefault(related, set()).add(str(pk))
    names: RelatedNames = {}
    for related, pks in wanted.items():
        for obj in related._default_manager.filter(pk__in=[pk for pk in pks if pk.isdigit()]):
            names[(related, str(obj.pk))] = _name_of(obj)
    return names


def _in_words(value: Any, field: Any = None, names: RelatedNames | None = None) -> str:
    related = getattr(field, "related_model", None)
    if related is not None and names is not None:
        items = value if isinstance(value, list | tuple) else [value]
        words = [names.get((related, str(pk)), f"#{pk}") for pk in items if pk is not None]
        if isinstance(value, list | tuple):
            return ", ".join(words) or "none"
        return words[0] if words else "—"
    choices = dict(getattr(field, "flatchoices", None) or ())
    if value in choices:
        return str(choices[value])
    if value is None or value == "":
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(_in_words(item) for item in value) or "none"
    return str(value)


def _name_of(obj: Any) -> str:
    name = getattr(obj, "name", None)  # a request's name may be blank: then its number
    return name if isinstance(name, str) and name else str(obj)


def _object_labels(events: list[AuditEvent], models: dict[str, Any]) -> dict[tuple[str, str], str]:
    """(target type, id) → the object's name as people know it ("alice", "A100 pool"); objects
    deleted since are left out."""
    wanted: dict[str, set[int]] = {}
    for event in events:
        if event.target_id.isdigit():
            wanted.setdefault(event.target_type, set()).add(int(event.target_id))
    labels: dict[tuple[str, str], str] = {}
    for target_type, ids in wanted.items():
        model = models.get(target_type)
        if model is None:
            continue
        for obj in model._default_manager.filter(pk__in=ids):
            labels[(target_type, str(obj.pk))] = _name_of(obj)
    return labels
