from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import django_filters
from django import forms
from django.db import models
from django.db.models import QuerySet
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.utils import extend_schema_field

from tenants.models import AuditEvent, Membership, Notification, Project

MAX_ID = 2**63 - 1


class StrictBooleanField(forms.Field):
    """true or false (True, False); anything else is a 400, not a silently dropped filter."""

    widget = forms.TextInput

    def to_python(self, value: Any) -> bool | None:
        if value in (None, ""):
            return None
        if value in (True, "true", "True"):
            return True
        if value in (False, "false", "False"):
            return False
        raise forms.ValidationError("Use true or false.", code="invalid")


class StrictBooleanFilter(django_filters.BooleanFilter):
    field_class = StrictBooleanField


@extend_schema_field({"type": "integer", "minimum": 1, "maximum": MAX_ID})
class IdFilter(django_filters.NumberFilter):
    """Another object by id: an id nobody can see filters to nothing (no 400 telling it apart)."""

    field_class = forms.IntegerField

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("min_value", 1)
        kwargs.setdefault("max_value", MAX_ID)
        super().__init__(*args, **kwargs)


class UtcDateTimeField(django_filters.fields.IsoDateTimeField):
    """An ISO 8601 instant in UTC: PostgreSQL refuses offsets past ±15:59 that Python accepts."""

    def to_python(self, value: Any) -> datetime | None:
        parsed = super().to_python(value)
        if parsed is None:
            return None
        try:
            return parsed.astimezone(UTC)
        except OverflowError:
            raise forms.ValidationError(
                "Enter a date and time within years 1 to 9999.", code="invalid"
            ) from None


class UtcDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = UtcDateTimeField


class PortalFilterSet(django_filters.FilterSet):
    """References filter by id and booleans are strict, as the schema documents them."""

    FILTER_DEFAULTS = {
        **django_filters.FilterSet.FILTER_DEFAULTS,
        models.ForeignKey: {"filter_class": IdFilter},
        models.OneToOneField: {"filter_class": IdFilter},
        models.BooleanField: {"filter_class": StrictBooleanFilter},
    }


class ProjectFilter(PortalFilterSet):
    class Meta:
        model = Project
        fields = ["team", "slug"]


class MembershipFilter(PortalFilterSet):
    user = django_filters.CharFilter(field_name="user__username")

    class Meta:
        model = Membership
        fields = ["team", "role", "user"]


class AuditEventFilter(PortalFilterSet):
    actor = django_filters.CharFilter(field_name="actor__username")
    since = UtcDateTimeFilter(field_name="occurred_at", lookup_expr="gte")
    action = django_filters.CharFilter(lookup_expr="startswith")

    class Meta:
        model = AuditEvent
        fields = ["action", "target_type", "target_id", "team", "project", "actor", "since"]


class NotificationFilter(PortalFilterSet):
    unread = StrictBooleanFilter(field_name="read_at", lookup_expr="isnull")

    class Meta:
        model = Notification
        fields = ["kind", "unread"]


class PortalFilterBackend(DjangoFilterBackend):
    """django-filter, skipped when the query string names none of the view's filters.

    Building and validating a filter form costs a list request about a millisecond even when
    nothing is filtered. No filterset here gives a filter a default value, so without any of
    its parameters the form would leave the queryset as it is; with one, it runs as usual
    (and answers 400 for a bad value).
    """

    filterset_base = PortalFilterSet

    def filter_queryset(self, request: Any, queryset: QuerySet[Any], view: Any) -> QuerySet[Any]:
        filterset_class = self.get_filterset_class(view, queryset)
        if filterset_class is not None and not any(
            name in request.query_params for name in filterset_class.base_filters
        ):
            return queryset
        return super().filter_queryset(request, queryset, view)
