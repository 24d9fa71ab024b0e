from __future__ import annotations

from decimal import Decimal
from typing import Any, cast

from django.core.cache import caches
from django.db.models import Count, Prefetch, QuerySet, Sum
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, permissions, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer
from rest_framework.throttling import ScopedRateThrottle

from scheduling.api.filters import FlavorFilter, GpuRequestFilter, QuotaFilter
from scheduling.api.serializers import (
    REQUEST_WORKLOAD_FIELDS,
    ApprovalRuleSerializer,
    ApproveSerializer,
    AskLeadSerializer,
    CancelSerializer,
    DecisionSerializer,
    ExemptionSerializer,
    ExtensionSerializer,
    FlavorSerializer,
    GpuRequestSerializer,
    NodePoolSerializer,
    QuotaSerializer,
    ReclaimPolicySerializer,
    RequestSummarySerializer,
    RequestTemplateSerializer,
    TierSerializer,
    UtilisationPointSerializer,
    WhatIfQuerySerializer,
    WhatIfSerializer,
)
from scheduling.choices import COMMITTED_STATUSES, RequestStatus
from scheduling.forms import CUSTOM_RANGE, RANGE_PRESETS, WHOLE_LIFE, TimeRangeForm
from scheduling.models import (
    Allocation,
    ApprovalRule,
    Flavor,
    GpuRequest,
    NodePool,
    Quota,
    ReclaimPolicy,
    RequestTemplate,
    Tier,
    UtilisationSample,
)
from scheduling.selectors.preemptions import PREEMPTION_COLUMNS
from scheduling.selectors.queue import fill_queue_positions
from scheduling.selectors.quotas import quota_usage
from scheduling.selectors.timeline import activity_points, request_life, window_between
from scheduling.services import catalog as catalog_services
from scheduling.services.estimates import (
    ESTIMATE_FIELDS,
    estimate_queued_request,
    what_if_for_project,
)
from scheduling.services.governance import (
    ask_lead,
    extend_runtime,
    grant_idle_exemption,
    keep_notebook_alive,
)
from scheduling.services.quotas import delete_quota, set_quota
from scheduling.services.requests import (
    approve_gpu_request,
    approve_when_quota_frees,
    cancel_gpu_request,
    reject_gpu_request,
    resume_gpu_request,
    submit_gpu_request,
)
from scheduling.services.templates import (
    create_request_template,
    delete_request_template,
    resubmit_gpu_request,
    update_request_template,
)
from tenants.api.base import ScopedModelViewSet, ScopedViewSetMixin
from tenants.api.permissions import PlatformAdminWrites
from tenants.models import Project, Scope, scope_of

SUMMARY_CACHE_SECONDS = 5
# What a request's page shows: its own columns and its owner's username.
REQUEST_COLUMNS_SHOWN = [
    *(
        name
        for name in GpuRequestSerializer.Meta.fields
        if name not in ("owner", "approved_by_name") and name not in REQUEST_WORKLOAD_FIELDS
    ),
    "owner__username",
    "approved_by__username",
    "cluster__slug",
    "queue_rank",
    *PREEMPTION_COLUMNS,
]
# What the request's workload fields read from its allocations (prefetched, one query).
ALLOCATION_COLUMNS_SHOWN = [
    "id",
    "request_id",
    "attempt",
    "node_name",
    "pod_names",
    "exit_code",
    "termination_reason",
]


def _summary_cache_key(scope: Scope) -> str:
    """A cache key that names exactly whose view the summary is.

    Admins share one view. A user who leads every team they belong to sees those teams' requests,
    so leads of the same teams share a key; anyone else sees their own requests and gets a key
    of their own. Team ids are part of the key, so a change of membership is a new key.
    """
    if scope.is_platform_admin:
        return "gpu-request-summary:v1:admin"
    teams = ",".join(str(team_id) for team_id in sorted(scope.team_ids))
    if scope.team_ids and scope.team_ids == scope.lead_team_ids:
        return f"gpu-request-summary:v1:leads:{teams}"
    return f"gpu-request-summary:v1:user:{scope.user_id}:{teams}"


def _request_summary(requests: QuerySet[GpuRequest]) -> dict[str, Any]:
    """Counts by status and the GPU-equivalents committed now, in one aggregate query."""
    by_status = {status: 0 for status in RequestStatus.values}
    committed = Decimal(0)
    for status_value, count, equivalents in (
        requests.order_by()
        .values_list("status")
        .annotate(count=Count("id"), equivalents=Sum("gpu_equivalent"))
        .values_list("status", "count", "equivalents")
    ):
        by_status[status_value] = count
        if status_value in COMMITTED_STATUSES:
            committed += equivalents or 0
    return {
        "total": sum(by_status.values()),
        "by_status": by_status,
        "waiting": by_status[RequestStatus.PENDING_APPROVAL] + by_status[RequestStatus.QUEUED],
        "running": by_status[RequestStatus.RUNNING],
        # As the schema says: 4 decimal places (SQLite's sum carries more).
        "committed_gpu_equivalent": str(committed.quantize(Decimal("0.0001"))),
    }


class CatalogViewSet(ScopedModelViewSet):
    """The catalogue: everyone with a role reads it, platform admins write it through services."""

    permission_classes = [permissions.IsAuthenticated, PlatformAdminWrites]


class TierViewSet(CatalogViewSet):
    """Scenario tiers: what they are for, how long work may run, which teams may use them."""

    queryset = Tier.objects.prefetch_related("allowed_teams", "allowed_projects")
    serializer_class = TierSerializer
    filterset_fields = ["slug"]

    def perform_create(self, serializer: BaseSerializer) -> None:
        serializer.instance = catalog_services.create_tier(
            actor=self.request.user, **serializer.validated_data
        )

    def perform_update(self, serializer: BaseSerializer) -> None:
        serializer.instance = catalog_services.update_tier(
            actor=self.request.user,
            tier=cast(Tier, serializer.instance),
            **serializer.validated_data,
        )

    def perform_destroy(self, instance: Tier) -> None:
        catalog_services.delete_tier(actor=self.request.user, tier=instance)


class NodePoolViewSet(CatalogViewSet):
    """GPU node pools: tier, sharing mode, how work is placed."""

    queryset = (
        NodePool.objects.select_related("tier", "cluster")
        .annotate(node_count=Count("nodes", distinct=True), gpu_count=Count("nodes__devices"))
        .order_by("name")
    )
    serializer_class = NodePoolSerializer
    filterset_fields = ["sharing_mode", "tier__slug", "cluster__slug"]

    def perform_create(self, serializer: BaseSerializer) -> None:
        pool = catalog_services.create_node_pool(
            actor=self.request.user, **serializer.validated_data
        )
        serializer.instance = self.get_queryset().get(pk=pool.pk)  # with its node counts

    def perform_update(self, serializer: BaseSerializer) -> None:
        serializer.instance = catalog_services.update_node_pool(
            actor=self.request.user,
            node_pool=cast(NodePool, serializer.instance),
            **serializer.validated_data,
        )

    def perform_destroy(self, instance: NodePool) -> None:
        catalog_services.delete_node_pool(actor=self.request.user, node_pool=instance)


class FlavorViewSet(CatalogViewSet):
    """What can be requested, and the GPU-equivalent weight quotas and prices count in."""

    queryset = Flavor.objects.select_related("pool", "pool__tier").prefetch_related("other_pools")
    serializer_class = FlavorSerializer
    filterset_class = FlavorFilter

    def perform_create(self, serializer: BaseSerializer) -> None:
        serializer.instance = catalog_services.create_flavor(
            actor=self.request.user, **serializer.validated_data
        )

    def perform_update(self, serializer: BaseSerializer) -> None:
        serializer.instance = catalog_services.update_flavor(
            actor=self.request.user,
            flavor=cast(Flavor, serializer.instance),
            **serializer.validated_data,
        )

    def perform_destroy(self, instance: Flavor) -> None:
        catalog_services.delete_flavor(actor=self.request.user, flavor=instance)


class ApprovalRuleViewSet(CatalogViewSet):
    """When a tier's requests are approved at once and when they wait for the team lead."""

    queryset = ApprovalRule.objects.select_related("tier").order_by("tier__name")
    serializer_class = ApprovalRuleSerializer
    filterset_fields = ["tier__slug"]

    def perform_create(self, serializer: BaseSerializer) -> None:
        serializer.instance = catalog_services.create_approval_rule(
            actor=self.request.user, **serializer.validated_data
        )

    def perform_update(self, serializer: BaseSerializer) -> None:
        serializer.instance = catalog_services.update_approval_rule(
            actor=self.request.user,
            approval_rule=cast(ApprovalRule, serializer.instance),
            **serializer.validated_data,
        )

    def perform_destroy(self, instance: ApprovalRule) -> None:
        catalog_services.delete_approval_rule(actor=self.request.user, approval_rule=instance)


class ReclaimPolicyViewSet(CatalogViewSet):
    """How a tier reclaims idle, overrunning and stuck work; a tier without one uses defaults."""

    queryset = ReclaimPolicy.objects.select_related("tier").order_by("tier__name")
    serializer_class = ReclaimPolicySerializer
    filterset_fields = ["tier__slug"]

    def perform_create(self, serializer: BaseSerializer) -> None:
        fields = dict(serializer.validated_data)
        serializer.instance = catalog_services.save_reclaim_policy(
            actor=self.request.user, tier=fields.pop("tier"), **fields
        )

    def perform_update(self, serializer: BaseSerializer) -> None:
        policy = cast(ReclaimPolicy, serializer.instance)
        serializer.instance = catalog_services.save_reclaim_policy(
            actor=self.request.user, tier=policy.tier, **serializer.validated_data
        )

    def perform_destroy(self, instance: ReclaimPolicy) -> None:
        catalog_services.delete_reclaim_policy(actor=self.request.user, policy=instance)


class QuotaViewSet(ScopedModelViewSet):
    """Team quotas (set by admins) and their split over projects (set by the team lead)."""

    queryset = Quota.objects.select_related("team", "project", "flavor")
    serializer_class = QuotaSerializer
    filterset_class = QuotaFilter

    def get_serializer_context(self) -> dict[str, Any]:
        context = super().get_serializer_context()
        scope = scope_of(self.request.user)
        context["quota_usage"] = quota_usage(
            None if scope.is_platform_admin else set(scope.team_ids)
        )
        return context

    def perform_create(self, serializer: BaseSerializer) -> None:
        data = serializer.validated_data
        if data.get("project") is None:
            serializer.instance = catalog_services.set_team_quota(
                actor=self.request.user,
                team=data["team"],
                flavor=data["flavor"],
                guaranteed=data["guaranteed"],
                limit=data["limit"],
            )
            return
        serializer.instance = set_quota(
            actor=self.request.user,
            team=data["team"],
            project=data.get("project"),
            flavor=data["flavor"],
            guaranteed=data["guaranteed"],
            limit=data["limit"],
        )

    def perform_update(self, serializer: BaseSerializer) -> None:
        quota = cast(Quota, serializer.instance)
        data = serializer.validated_data
        serializer.instance = set_quota(
            actor=self.request.user,
            team=quota.team,
            project=quota.project,
            flavor=quota.flavor,
            guaranteed=data.get("guaranteed", quota.guaranteed),
            limit=data.get("limit", quota.limit),
            quota=quota,
        )

    def perform_destroy(self, instance: Quota) -> None:
        if instance.project_id is None:
            catalog_services.delete_team_quota(actor=self.request.user, quota=instance)
            return
        delete_quota(actor=self.request.user, quota=instance)


class RequestTemplateViewSet(ScopedModelViewSet):
    """Saved request bodies: one's own, and the team's shared ones (written by its lead)."""

    queryset = RequestTemplate.objects.select_related("owner", "team")
    serializer_class = RequestTemplateSerializer
    filterset_fields = ["team", "is_shared", "kind"]

    def perform_create(self, serializer: BaseSerializer) -> None:
        serializer.instance = create_request_template(
            actor=self.request.user, **serializer.validated_data
        )

    def perform_update(self, serializer: BaseSerializer) -> None:
        serializer.instance = update_request_template(
            actor=self.request.user,
            template=cast(RequestTemplate, serializer.instance),
            **serializer.validated_data,
        )

    def perform_destroy(self, instance: RequestTemplate) -> None:
        delete_request_template(actor=self.request.user, template=instance)


# The request page's time-range picker, as query parameters (docs/governance.md).
UTILISATION_RANGE_PARAMETERS = [
    OpenApiParameter(
        "range",
        str,
        enum=[WHOLE_LIFE, *RANGE_PRESETS, CUSTOM_RANGE],
        description="The last 6 hours to 30 days, the request's whole life, or custom "
        "(with start and end, at most 90 days). Without it: the newest 500 samples.",
    ),
    OpenApiParameter(
        "start", str, description="A custom range's start, YYYY-MM-DDTHH:MM (portal time)."
    ),
    OpenApiParameter(
        "end", str, description="A custom range's end, YYYY-MM-DDTHH:MM (portal time)."
    ),
]


class GpuRequestViewSet(
    ScopedViewSetMixin,
    mixins.CreateModelMixin,
    mixins.RetrieveModelMixin,
    mixins.ListModelMixin,
    viewsets.GenericViewSet,
):
    """GPU requests: submit, follow, cancel; leads approve or reject. Requests are not edited."""

    queryset = GpuRequest.objects.select_related("owner", "flavor", "project", "approved_by")
    serializer_class = GpuRequestSerializer
    filterset_class = GpuRequestFilter
    ordering_fields = ["created_at", "priority", "status"]

    def get_queryset(self) -> QuerySet[Any]:
        """Reads load what the serializer shows: the request's columns and the owner's name.

        The other relations are rendered as ids from the row, so the list joins only the owner
        and reads one of its columns. An approval reads the id and team only (its service reads
        the rest again, locked); other actions that change a request keep the joins, as their
        services read those relations.
        """
        queryset = super().get_queryset()
        if self.action in ("list", "retrieve"):
            queryset = (
                queryset.select_related(None)
                .select_related("owner", "approved_by", "cluster", "preempted_by__team")
                .only(*REQUEST_COLUMNS_SHOWN)
                .prefetch_related(
                    Prefetch(
                        "allocations",
                        queryset=Allocation.objects.only(*ALLOCATION_COLUMNS_SHOWN),
                        to_attr="observed_allocations",
                    )
                )
            )
        elif self.action == "approve":
            # The approval re-reads the request locked, with the relations it reads
            # (`locked_for_decision`): the lookup only finds it in the caller's scope.
            queryset = queryset.select_related(None).only("id", "team")
        return queryset

    def get_serializer(self, *args: Any, **kwargs: Any) -> BaseSerializer:
        """A queued request's position is counted from the queue's ranks, for a page of
        requests in one query (scheduling/selectors/queue.py)."""
        shown = args[0] if args else kwargs.get("instance")
        if isinstance(shown, GpuRequest):
            fill_queue_positions([shown])
        elif isinstance(shown, list | QuerySet):
            fill_queue_positions(shown)
        return super().get_serializer(*args, **kwargs)

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """One request; one that just entered the queue gets its estimated start now rather
        than after the next refresh (docs/estimates.md)."""
        gpu_request = self.get_object()
        if (
            gpu_request.status == RequestStatus.QUEUED
            and gpu_request.estimated_start_at is None
            and estimate_queued_request(request_id=gpu_request.pk)
        ):
            gpu_request.refresh_from_db(fields=ESTIMATE_FIELDS)
        return Response(self.get_serializer(gpu_request).data)

    def get_throttles(self) -> list[Any]:
        if self.action in ("create", "resubmit"):
            self.throttle_scope = "request-create"
            return [ScopedRateThrottle()]
        return []

    def perform_create(self, serializer: BaseSerializer) -> None:
        serializer.instance = submit_gpu_request(
            actor=self.request.user, spec=cast(GpuRequestSerializer, serializer).spec()
        )

    def _act(
        self, request: Request, service: Any, body_class: Any = None, **fixed: Any
    ) -> Response:
        """Find the request first (another tenant's is 404), then check the body, then act."""
        gpu_request = self.get_object()
        arguments = dict(fixed)
        if body_class is not None:
            body = body_class(data=request.data)
            body.is_valid(raise_exception=True)
            arguments.update(body.validated_data)
        updated = service(actor=request.user, request=gpu_request, **arguments)
        return Response(self.get_serializer(updated).data, status=status.HTTP_200_OK)

    @extend_schema(request=ApproveSerializer, responses=GpuRequestSerializer)
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str | None = None) -> Response:
        """Approve; with `run_when_quota_frees`, an approval over the quota limit waits,
        pending and marked, until quota frees instead of being refused."""
        gpu_request = self.get_object()
        body = ApproveSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        wait_for_quota = body.validated_data.pop("run_when_quota_frees")
        service = approve_when_quota_frees if wait_for_quota else approve_gpu_request
        updated = service(actor=request.user, request=gpu_request, **body.validated_data)
        return Response(self.get_serializer(updated).data, status=status.HTTP_200_OK)

    @extend_schema(request=DecisionSerializer, responses=GpuRequestSerializer)
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk: str | None = None) -> Response:
        return self._act(request, reject_gpu_request, DecisionSerializer)

    @extend_schema(request=AskLeadSerializer, responses=GpuRequestSerializer)
    @action(detail=True, methods=["post"], url_path="ask-idle-exemption")
    def ask_idle_exemption(self, request: Request, pk: str | None = None) -> Response:
        return self._act(request, ask_lead, AskLeadSerializer, about="idle_exemption")

    @extend_schema(request=AskLeadSerializer, responses=GpuRequestSerializer)
    @action(detail=True, methods=["post"], url_path="ask-extension")
    def ask_extension(self, request: Request, pk: str | None = None) -> Response:
        return self._act(request, ask_lead, AskLeadSerializer, about="extension")

    @extend_schema(request=ExemptionSerializer, responses=GpuRequestSerializer)
    @action(detail=True, methods=["post"], url_path="idle-exemption")
    def idle_exemption(self, request: Request, pk: str | None = None) -> Response:
        return self._act(request, grant_idle_exemption, ExemptionSerializer)

    @extend_schema(request=None, responses=GpuRequestSerializer)
    @action(detail=True, methods=["post"], url_path="keep-alive")
    def keep_alive(self, request: Request, pk: str | None = None) -> Response:
        """The owner of a running notebook holds its idle rule off for the tier's keep-alive
        span from now; `idle_exempt_until` says until when."""
        return self._act(request, keep_notebook_alive)

    @extend_schema(request=ExtensionSerializer, responses=GpuRequestSerializer)
    @action(detail=True, methods=["post"])
    def extend(self, request: Request, pk: str | None = None) -> Response:
        return self._act(request, extend_runtime, ExtensionSerializer)

    @extend_schema(request=None, responses=GpuRequestSerializer)
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, pk: str | None = None) -> Response:
        return self._act(request, resume_gpu_request)

    @extend_schema(
        parameters=UTILISATION_RANGE_PARAMETERS,
        responses=UtilisationPointSerializer(many=True),
    )
    @action(detail=True, methods=["get"], pagination_class=None, filter_backends=[])
    def utilisation(self, request: Request, pk: str | None = None) -> Response:
        """The GPU activity and memory timeline of the request's attempts: the newest 500
        samples, or with `range` (or `start` and `end`) the request page's chart points over
        that range, as its time-range picker takes it; a bad range is a 400."""
        gpu_request = self.get_object()
        samples = UtilisationSample.objects.filter(allocation__request=gpu_request)
        form = TimeRangeForm(request.query_params, default=WHOLE_LIFE, whole_life=True)
        if not form.is_bound:
            newest = samples.order_by("-sampled_at").values(
                "sampled_at", "activity_percent", "memory_used_mib"
            )[:500]
            return Response(UtilisationPointSerializer(list(newest)[::-1], many=True).data)
        if not form.is_valid():
            raise ValidationError(form.error_fields())
        now = timezone.now()
        bounds = form.bounds(now=now, life=request_life(gpu_request=gpu_request, now=now))
        if bounds is None:  # the whole life of a request that never started
            return Response([])
        points = activity_points(samples, window_between(*bounds))
        return Response(UtilisationPointSerializer(points, many=True).data)

    @extend_schema(responses=RequestSummarySerializer)
    @action(detail=False, methods=["get"])
    def summary(self, request: Request) -> Response:
        """Dashboard counters over the requests the caller can see, cached a few seconds.

        Dashboards poll this; the counts are a whole-table aggregate, so each scope's answer is
        kept for SUMMARY_CACHE_SECONDS under a key that names the scope (never shared across
        tenants), and a poll costs a cache read instead of a GROUP BY. The answer is kept in
        the worker's own memory (the "local" cache): each worker recomputes it at most every
        few seconds, and a poll makes no round trip beyond authentication.
        """
        local = caches["local"]
        key = _summary_cache_key(scope_of(request.user))
        data = local.get(key)
        if data is None:
            data = _request_summary(GpuRequest.objects.visible_to(request.user))
            local.set(key, data, SUMMARY_CACHE_SECONDS)
        return Response(data)

    @extend_schema(
        parameters=[WhatIfQuerySerializer],
        responses={
            200: WhatIfSerializer(many=True),
            404: OpenApiResponse(
                response=OpenApiTypes.OBJECT,
                description="No such project within the caller's reach (the error shape).",
            ),
        },
    )
    @action(
        detail=False,
        methods=["get"],
        url_path="what-if",
        pagination_class=None,
        filter_backends=[],
    )
    def what_if(self, request: Request) -> Response:
        """For each flavor the project may use for `kind`: when a request submitted now would
        likely start (a forecast of the queue, docs/estimates.md); the request form shows the
        same answer. Another tenant's project is 404."""
        query = WhatIfQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        project = get_object_or_404(
            Project.objects.visible_to(request.user).select_related("team"),
            pk=query.validated_data["project"],
        )
        rows = what_if_for_project(
            project=project,
            owner=request.user,
            gpu_count=query.validated_data["gpu_count"],
            max_runtime_seconds=query.validated_data["max_runtime_seconds"],
            kind=query.validated_data["kind"],
        )
        return Response(WhatIfSerializer(rows, many=True).data)

    @extend_schema(request=None, responses={201: GpuRequestSerializer})
    @action(detail=True, methods=["post"])
    def resubmit(self, request: Request, pk: str | None = None) -> Response:
        """Submit a finished request's body again as a new request (201, the new request)."""
        created = resubmit_gpu_request(actor=request.user, request=self.get_object())
        return Response(self.get_serializer(created).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=CancelSerializer, responses=GpuRequestSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        return self._act(request, cancel_gpu_request, CancelSerializer)
