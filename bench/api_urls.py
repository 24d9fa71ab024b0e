"""The product's URLs plus the benchmark's baseline: a plain DRF ModelSerializer list.

The baseline has the same authentication, pagination (50) and tenant filter as the product's
request list, but none of its work beyond that: no explicit fields, no related names, no filters,
no ordering parameters. The ratio product/baseline says what the product's list costs on top of
what DRF itself costs.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.urls import path
from rest_framework import generics, serializers

from portal.urls import handler404, handler500
from portal.urls import urlpatterns as portal_urlpatterns
from scheduling.models import GpuRequest


class BaselineRequestSerializer(serializers.ModelSerializer):
    class Meta:
        model = GpuRequest
        fields = "__all__"


class BaselineRequestList(generics.ListAPIView):
    serializer_class = BaselineRequestSerializer

    def get_queryset(self) -> QuerySet[Any]:
        return GpuRequest.objects.visible_to(self.request.user).order_by("-created_at", "-id")


urlpatterns = [
    path("bench/baseline/requests/", BaselineRequestList.as_view(), name="bench-baseline"),
    *portal_urlpatterns,
]

__all__ = ["handler404", "handler500", "urlpatterns"]
