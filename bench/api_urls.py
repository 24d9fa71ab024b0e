"""The product's URLs plus the benchmark's references: two DRF viewsets and the floor create.

The baseline (`/bench/baseline/requests/`) is what a DRF user writes first for the same rows: a
stock `ModelViewSet` with a `ModelSerializer` whose `fields` are those the product's request
list shows, the owner and the approving lead as usernames (`CharField(source="owner.username")`),
the current attempt's workload fields as `SerializerMethodField`s, and the queryset
`GpuRequest.objects.visible_to(user)` with nothing added: the tenant filter only, so it serves
the same rows to the same caller. Each row's owner (and approving lead) is therefore read with a
query of its own; the workload fields read the current attempt's allocation with one query per
field, skipped for a request that never started (the product's own fallback, `current_allocation`).

The tuned baseline (`/bench/tuned-baseline/requests/`) is the same viewset with the queryset
the DRF documentation prescribes for rendered relations:
`.select_related("owner", "approved_by").prefetch_related("allocations")`, its workload fields
read from the prefetched allocations. Neither has `only()`, a response cache or a hand-written
representation; everything else is the project's defaults: token authentication, pagination
(pages of 50 with a count), filter backends, model ordering. A create stores the body with the
serializer's own validation (project and flavor looked up by id, unscoped) and one INSERT: no
tier, capacity, quota, budget or approval check, no audit, nothing queued.

The floor create (`/bench/floor/requests/`) is a DRF view without a serializer: the same
authentication and body, the project read (visible to the caller), one INSERT in a transaction,
the id back. No create through DRF can cost less; it says what this machine allows at all.
"""

from __future__ import annotations

from typing import Any, cast

from django.db import transaction
from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from django.urls import path
from rest_framework import serializers, status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import SimpleRouter
from rest_framework.views import APIView

from portal.urls import handler404, handler500
from portal.urls import urlpatterns as portal_urlpatterns
from scheduling.api.serializers import GpuRequestSerializer
from scheduling.models import Allocation, GpuRequest
from scheduling.selectors.connect import connect_url, current_allocation
from tenants.models import Project


class BaselineRequestSerializer(serializers.ModelSerializer):
    """The product's request fields: the columns built by `ModelSerializer`, the owner's name,
    and the current attempt's workload, as the product shows them."""

    owner = serializers.CharField(source="owner.username", read_only=True)
    approved_by_name = serializers.CharField(
        source="approved_by.username", read_only=True, allow_null=True
    )
    connect_url = serializers.SerializerMethodField()
    node_names = serializers.SerializerMethodField()
    pod_names = serializers.SerializerMethodField()
    exit_code = serializers.SerializerMethodField()
    termination_reason = serializers.SerializerMethodField()

    class Meta:
        model = GpuRequest
        fields = list(GpuRequestSerializer.Meta.fields)
        read_only_fields = list(GpuRequestSerializer.Meta.read_only_fields)

    @staticmethod
    def current(gpu_request: GpuRequest) -> Allocation | None:
        return current_allocation(gpu_request)

    def get_connect_url(self, gpu_request: GpuRequest) -> str | None:
        url = connect_url(gpu_request)
        if url is not None and url.startswith("/"):
            return str(self.context["request"].build_absolute_uri(url))
        return url

    def get_node_names(self, gpu_request: GpuRequest) -> list[str]:
        allocation = self.current(gpu_request)
        return [name for name in allocation.node_name.split(",") if name] if allocation else []

    def get_pod_names(self, gpu_request: GpuRequest) -> list[str]:
        allocation = self.current(gpu_request)
        return list(allocation.pod_names) if allocation else []

    def get_exit_code(self, gpu_request: GpuRequest) -> int | None:
        allocation = self.current(gpu_request)
        return allocation.exit_code if allocation else None

    def get_termination_reason(self, gpu_request: GpuRequest) -> str:
        allocation = self.current(gpu_request)
        return allocation.termination_reason if allocation else ""


class TunedBaselineRequestSerializer(BaselineRequestSerializer):
    """The same fields, the workload read from the request's prefetched allocations."""

    @staticmethod
    def current(gpu_request: GpuRequest) -> Allocation | None:
        return next(
            (a for a in gpu_request.allocations.all() if a.attempt == gpu_request.attempt), None
        )


class BaselineRequestViewSet(viewsets.ModelViewSet):
    """A stock viewset over the caller's requests: list, detail, create (and the rest)."""

    serializer_class = BaselineRequestSerializer

    def get_queryset(self) -> QuerySet[Any]:
        return GpuRequest.objects.visible_to(self.request.user)

    def perform_create(self, serializer: Any) -> None:
        project = serializer.validated_data["project"]
        serializer.save(owner=self.request.user, team_id=project.team_id, gpu_equivalent=1)


class TunedBaselineRequestViewSet(BaselineRequestViewSet):
    """The stock viewset with the join and prefetch the DRF documentation prescribes."""

    serializer_class = TunedBaselineRequestSerializer

    def get_queryset(self) -> QuerySet[Any]:
        return (
            GpuRequest.objects.visible_to(self.request.user)
            .select_related("owner", "approved_by")
            .prefetch_related("allocations")
        )


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


router = SimpleRouter()
router.register("bench/baseline/requests", BaselineRequestViewSet, basename="bench-baseline")
router.register(
    "bench/tuned-baseline/requests", TunedBaselineRequestViewSet, basename="bench-tuned-baseline"
)

urlpatterns = [
    *router.urls,
    path("bench/floor/requests/", FloorRequestCreate.as_view(), name="bench-floor"),
    *portal_urlpatterns,
]

__all__ = ["handler404", "handler500", "urlpatterns"]
