"""The product's URLs plus the benchmark's baselines: a plain DRF ModelSerializer list and
create, and the floor of a create: no serializer at all.

The baseline list has the same authentication, pagination (50) and tenant filter as the
product's request list, but none of its work beyond that: no explicit fields, no related names,
no filters, no ordering parameters. The ratio product/baseline says what the product's list
costs on top of what DRF itself costs.

The baseline create takes the product's body and stores it with one INSERT: no tier, capacity,
quota, budget or approval check, no lifecycle, no audit, nothing queued. It says what a create
costs DRF and Django on this machine before the product decides anything.

The floor create is a DRF view without a serializer: the same authentication and body, the
project read (visible to the caller), one INSERT in a transaction, the id back. No create
through DRF can cost less; it says what this machine allows at all.
"""

from __future__ import annotations

from typing import Any, cast

from django.db import transaction
from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from django.urls import path
from rest_framework import generics, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.urls import handler404, handler500
from portal.urls import urlpatterns as portal_urlpatterns
from scheduling.models import GpuRequest
from tenants.models import Project


class BaselineRequestSerializer(serializers.ModelSerializer):
    class Meta:
        model = GpuRequest
        fields = "__all__"


class BaselineRequestCreateSerializer(serializers.ModelSerializer):
    class Meta:
        model = GpuRequest
        fields = [
            "project",
            "flavor",
            "gpu_count",
            "kind",
            "image",
            "command",
            "max_runtime_seconds",
        ]


class BaselineRequestList(generics.ListCreateAPIView):
    def get_serializer_class(self) -> type[serializers.ModelSerializer]:
        if self.request.method == "POST":
            return BaselineRequestCreateSerializer
        return BaselineRequestSerializer

    def get_queryset(self) -> QuerySet[Any]:
        return GpuRequest.objects.visible_to(self.request.user).order_by("-created_at", "-id")

    def perform_create(self, serializer: Any) -> None:
        project = serializer.validated_data["project"]
        serializer.save(owner=self.request.user, team_id=project.team_id, gpu_equivalent=1)


class FloorRequestCreate(APIView):
    def post(self, request: Request) -> Response:
        body, owner = request.data, cast(Any, request.user)
        project = get_object_or_404(Project.objects.visible_to(request.user), pk=body["project"])
        with transaction.atomic():
            created = GpuRequest.objects.create(
                project=project,
                team_id=project.team_id,
                owner=owner,
                flavor_id=body["flavor"],
                gpu_count=body["gpu_count"],
                kind=body["kind"],
                image=body["image"],
                command=body["command"],
                max_runtime_seconds=body["max_runtime_seconds"],
                gpu_equivalent=1,
            )
        return Response({"id": created.pk}, status=status.HTTP_201_CREATED)


urlpatterns = [
    path("bench/baseline/requests/", BaselineRequestList.as_view(), name="bench-baseline"),
    path("bench/floor/requests/", FloorRequestCreate.as_view(), name="bench-floor"),
    *portal_urlpatterns,
]

__all__ = ["handler404", "handler500", "urlpatterns"]
