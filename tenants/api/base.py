"""Base API classes every app's endpoints build on: tenant scoping is applied here, once."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from rest_framework import mixins, serializers, viewsets
from rest_framework.relations import MANY_RELATION_KWARGS

from tenants.models import ScopedQuerySet


class ScopedViewSetMixin:
    """Restricts every queryset to `visible_to(request.user)`: other tenants' objects are 404."""

    request: Any

    def get_queryset(self) -> QuerySet[Any]:
        queryset = super().get_queryset()  # type: ignore[misc]
        assert isinstance(queryset, ScopedQuerySet), "scoped endpoints need a ScopedQuerySet"
        return queryset.visible_to(self.request.user)


class ScopedReadOnlyViewSet(ScopedViewSetMixin, viewsets.ReadOnlyModelViewSet):
    """List and retrieve what the caller may see."""


class ScopedModelViewSet(
    ScopedViewSetMixin,
    mixins.CreateModelMixin,
    mixins.RetrieveModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    mixins.ListModelMixin,
    viewsets.GenericViewSet,
):
    """Full CRUD over what the caller may see; writes go through services that check roles."""

    http_method_names = ["get", "post", "patch", "delete", "head", "options"]


class FixedOnceCreatedMixin:
    """A serializer whose `fixed_once_created` fields are set on create and never change.

    On an update they are read-only (a value sent is ignored), and the schema's PATCH body
    leaves them out (`PortalAutoSchema.get_request_serializer`), so the contract says so too.
    """

    fixed_once_created: tuple[str, ...] = ()
    instance: Any
    fields: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance is not None and not isinstance(self.instance, list | tuple):
            self.fix_once_created()

    def fix_once_created(self) -> None:
        for name in self.fixed_once_created:
            self.fields[name].read_only = True


class JsonBooleanField(serializers.BooleanField):
    """true or false, as JSON writes them: 0, 1, "yes" or "true" are a 400, as the schema says.

    Every model serializer's boolean is one (`TenantsConfig.ready`); the API parses only JSON.
    """

    def to_internal_value(self, data: Any) -> bool:
        if isinstance(data, bool):
            return data
        self.fail("invalid", input=data)
        raise AssertionError  # fail() raises


class JsonIntegerField(serializers.IntegerField):
    """A whole number as a JSON number: "3" or true is a 400 (DRF would take "3"), as the
    schema says; 3.0 is JSON Schema's integer too, 2.5 is not."""

    def to_internal_value(self, data: Any) -> int:
        whole = isinstance(data, int) or (isinstance(data, float) and data.is_integer())
        if isinstance(data, bool) or not whole:
            self.fail("invalid")
        return int(super().to_internal_value(data))


class JsonStringMixin:
    """Text as a JSON string: a number is a 400 (DRF would take 0 for "0"), as the schema says."""

    fail: Any  # the field's own

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)  # type: ignore[misc]


class JsonCharField(JsonStringMixin, serializers.CharField):
    """A string field; every model serializer's text is one (`TenantsConfig.ready`)."""


class JsonSlugField(JsonStringMixin, serializers.SlugField):
    """A slug field that takes only a JSON string."""


class JsonListRelatedField(serializers.ManyRelatedField):
    """Several references, as a JSON list: an object is a 400 (DRF would take a dict's keys)."""

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, list):
            self.fail("not_a_list", input_type=type(data).__name__)
        return super().to_internal_value(data)


class JsonListRelatedMixin:
    """`many=True` makes a `JsonListRelatedField` of this reference field."""

    @classmethod
    def many_init(cls, *args: Any, **kwargs: Any) -> JsonListRelatedField:
        many = {key: value for key, value in kwargs.items() if key in MANY_RELATION_KWARGS}
        child: Any = cls(*args, **kwargs)
        return JsonListRelatedField(child_relation=child, **many)


class ScopedPrimaryKeyRelatedField(JsonListRelatedMixin, serializers.PrimaryKeyRelatedField):
    """A reference to another object that must be visible to the caller (else 'does not exist')."""

    def get_queryset(self) -> QuerySet[Any]:
        queryset = super().get_queryset()
        request = self.context.get("request")
        assert isinstance(queryset, ScopedQuerySet)
        return queryset.visible_to(request.user if request else None)
