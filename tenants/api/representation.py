"""Serializer output for hot list endpoints without DRF's per-field machinery.

DRF renders a row by walking every readable field: a generator, `get_attribute` with its
exception handling, a `to_representation` call and a `SkipField` check per field. For the request
list (37 fields, 50 rows a page) that walk was most of the response time. Most of those fields
render as the plain value the model instance already holds, so `PlannedRepresentationMixin`
builds a plan once per serializer: for each field, where to read the value on the instance and
whether it needs its DRF field to render it. Plain values (str, int, bool, None) are copied as
they are; everything else (datetimes, decimals, lists, dicts, enum members of a fresh instance)
still goes through the field's own `to_representation`, so the output is DRF's, byte for byte
(`tests/scheduling/test_planned_representation.py` compares both on every field).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC
from typing import Any

from django.core.exceptions import FieldDoesNotExist
from django.db import models
from django.utils import timezone
from rest_framework import ISO_8601, serializers
from rest_framework.fields import SkipField
from rest_framework.relations import PKOnlyObject, PrimaryKeyRelatedField
from rest_framework.settings import api_settings

# A field of the plan: its output name, how to read its value, the one type of value that is
# its own output (None: every value goes through the field), whether it is a datetime rendered
# in DRF's default ISO 8601 form, and the field.
Step = tuple[str, Callable[[Any], Any], type | None, bool, serializers.Field]
Plan = list[Step | serializers.Field]

# Fields whose representation of a value of one type is that value itself. A ChoiceField maps a
# value through its choices' string form, which for a str of text choices is the value again.
_COPIED_TYPE: tuple[tuple[type[serializers.Field], type], ...] = (
    (serializers.BooleanField, bool),
    (serializers.IntegerField, int),
    (serializers.ChoiceField, str),
    (serializers.CharField, str),
)
_UTC_NAMES = frozenset({"UTC", "Etc/UTC"})


def _attribute_reader(name: str) -> Callable[[Any], Any]:
    def read(instance: Any) -> Any:
        return getattr(instance, name)

    return read


def _copied_type(field: serializers.Field) -> type | None:
    for field_class, value_type in _COPIED_TYPE:
        if isinstance(field, field_class):
            return value_type
    return None


def _step(field: serializers.Field, model: type[Any]) -> Step | None:
    """How to render one field quickly, or None when only DRF's own path is right for it."""
    source, name = field.source, field.field_name
    if not isinstance(source, str) or not name or source == "*" or field.source_attrs != [source]:
        return None
    if isinstance(field, PrimaryKeyRelatedField) and field.pk_field is None:
        # The related object's key is on the row already: read it without loading the object.
        try:
            model_field = model._meta.get_field(source)
        except FieldDoesNotExist:
            return None
        if not isinstance(getattr(model_field, "target_field", None), models.IntegerField):
            return None
        return (name, _attribute_reader(model_field.attname), int, False, field)
    if isinstance(field, serializers.RelatedField | serializers.SerializerMethodField):
        return None
    return (
        name,
        _attribute_reader(source),
        _copied_type(field),
        _is_iso_datetime(field),
        field,
    )


def _is_context_free(field: serializers.Field) -> bool:
    """A field whose output never depends on the request (its parent's context)."""
    return not isinstance(
        field,
        serializers.BaseSerializer | serializers.RelatedField | serializers.SerializerMethodField,
    )


def _is_iso_datetime(field: serializers.Field) -> bool:
    return (
        type(field) is serializers.DateTimeField
        and getattr(field, "format", api_settings.DATETIME_FORMAT) == ISO_8601
        and getattr(field, "timezone", None) is None
    )


class PlannedRepresentationMixin:
    """For a ModelSerializer whose output is read on hot paths (lists of many rows).

    The plan is built from the first instance's fields. When every field left to DRF's own
    path is context-free, the plan is kept on the class, so later serializers never build their
    fields (a deep copy of every declared field) just to render; otherwise each serializer
    keeps its own.
    """

    _class_plan: Plan | None = None
    _instance_plan: Plan | None = None
    _utc_output: bool | None = None

    def _plan(self) -> Plan:
        cls = type(self)
        plan = cls.__dict__.get("_class_plan") or self._instance_plan
        if plan is not None:
            return plan
        model = self.Meta.model  # type: ignore[attr-defined]
        plan = [
            _step(field, model) or field
            for field in self._readable_fields  # type: ignore[attr-defined]
        ]
        if all(_is_context_free(step) for step in plan if not isinstance(step, tuple)):
            cls._class_plan = plan
        else:
            self._instance_plan = plan
        return plan

    def to_representation(self, instance: Any) -> dict[str, Any]:
        plan = self._plan()
        utc_output = self._utc_output
        if utc_output is None:
            # DRF renders an aware datetime in the current time zone, read once per serializer
            # (one request) rather than once per value.
            utc_output = self._utc_output = timezone.get_current_timezone_name() in _UTC_NAMES
        output: dict[str, Any] = {}
        for step in plan:
            if isinstance(step, tuple):
                name, read, copied_type, iso_datetime, field = step
                value = read(instance)
                if value is None or type(value) is copied_type:
                    output[name] = value
                elif iso_datetime and utc_output and value.tzinfo is UTC:
                    # DRF's output for a UTC datetime, without its time zone lookups.
                    text = value.isoformat()
                    output[name] = text[:-6] + "Z" if text.endswith("+00:00") else text
                else:
                    output[name] = field.to_representation(value)
                continue
            # DRF's own path, as `Serializer.to_representation` takes it.
            try:
                attribute = step.get_attribute(instance)
            except SkipField:
                continue
            check_for_none = attribute.pk if isinstance(attribute, PKOnlyObject) else attribute
            output[str(step.field_name)] = (
                None if check_for_none is None else step.to_representation(attribute)
            )
        return output
