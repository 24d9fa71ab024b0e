"""Base API classes every app's endpoints build on: tenant scoping is applied here, once."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from rest_framework import mixins, serializers, viewsets

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


class ScopedPrimaryKeyRelatedField(serializers.PrimaryKeyRelatedField):
    """A reference to another object that must be visible to the caller (else 'does not exist')."""

    def get_queryset(self) -> QuerySet[Any]:
        queryset = super().get_queryset()
        request = self.context.get("request")
        assert isinstance(queryset, ScopedQuerySet)
        return queryset.visible_to(request.user if request else None)
