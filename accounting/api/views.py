"""Reports (`usage/`, `chargeback/`: the same selectors as the dashboards), budgets, statements."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from decimal import Decimal
from typing import Any, cast

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import QuerySet
from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from django.utils.text import slugify
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import permissions, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer
from rest_framework.throttling import UserRateThrottle
from rest_framework.views import APIView

from accounting.api.serializers import (
    BudgetSerializer,
    ChargebackQuerySerializer,
    ChargebackResponseSerializer,
    EfficiencyQuerySerializer,
    ExportSerializer,
    PriceSerializer,
    ResourcePriceSerializer,
    StatementCloseSerializer,
    StatementSerializer,
    UsageQuerySerializer,
)
from accounting.exports import XLSX_CONTENT_TYPE, rows_to_csv, rows_to_xlsx
from accounting.models import Budget, Price, ResourcePrice, Statement
from accounting.selectors.budgets import with_burn
from accounting.selectors.efficiency import efficiency_rows, request_efficiency
from accounting.selectors.usage import UsageQuery, chargeback, check_filters, totals, usage_rows
from accounting.services.budgets import create_budget, delete_budget, update_budget
from accounting.services.prices import (
    create_price,
    create_resource_price,
    delete_price,
    delete_resource_price,
    update_price,
    update_resource_price,
)
from accounting.services.statements import STATEMENT_COLUMNS, close_statement, statement_rows
from scheduling.models import Cluster, Flavor, GpuRequest, NodePool
from tenants.api.base import ScopedModelViewSet, ScopedReadOnlyViewSet
from tenants.api.permissions import PlatformAdminWrites
from tenants.models import Project, Team


class ExportRateThrottle(UserRateThrottle):
    """Downloads (`?export=csv|xlsx`) are limited per user (`EXPORT_RATE`); reading is not.

    A report export walks a whole month of rows, so an unbounded loop of them would be the
    cheapest way to load the database.
    """

    scope = "export"

    def allow_request(self, request: Any, view: Any) -> bool:
        if not request.query_params.get("export"):
            return True
        return super().allow_request(request, view)


# What a report answers: JSON, or with `?export=csv|xlsx` the download.
EXPORT_RESPONSES: dict[Any, Any] = {
    (200, "text/csv"): OpenApiTypes.STR,
    (200, XLSX_CONTENT_TYPE): OpenApiTypes.BINARY,
}
REPORT_RESPONSES = {(200, "application/json"): OpenApiTypes.OBJECT, **EXPORT_RESPONSES}


def _columns(query: UsageQuery) -> list[str]:
    columns: list[str] = []
    for key in query.group_by:
        columns += [key] if key in ("month", "day") else [f"{key}_id", key]
    return [*columns, "gpu_hours", "cost", *COST_PARTS, "currency"]


#: The cost columns added beside `cost` (which stays first, as files before them had it).
COST_PARTS = ("gpu_cost", "cpu_cost", "memory_cost", "storage_cost", "total_cost")


def export_response(
    rows: list[dict[str, Any]], *, columns: list[str], filename: str, fmt: str
) -> HttpResponse:
    """The rows as a CSV or XLSX download (formulas neutralised in both)."""
    if fmt == "xlsx":
        body: bytes | str = rows_to_xlsx(rows, columns=columns, title=filename)
        response = HttpResponse(body, content_type=XLSX_CONTENT_TYPE)
    else:
        response = HttpResponse(
            rows_to_csv(rows, columns=columns), content_type="text/csv; charset=utf-8"
        )
    response["Content-Disposition"] = f'attachment; filename="{filename}.{fmt}"'
    return response


# Every exported row says whose it is, whatever the grouping: a drill-down's file (one project's
# users, say) read alone still names the team and the project.
EXPORT_ATTRIBUTION = ("team", "project")
FILENAME_FILTERS: tuple[tuple[str, Any], ...] = (
    ("team", Team),
    ("project", Project),
    ("cluster", Cluster),
    ("pool", NodePool),
    ("flavor", Flavor),
    ("user", get_user_model()),
)


def export_query(query: UsageQuery) -> UsageQuery:
    """The query an export runs: grouped as asked, then by team and project where the grouping
    lacks them. The asked columns come first and the sums are the same; a row is split only
    where it spans several teams or projects."""
    missing = tuple(key for key in EXPORT_ATTRIBUTION if key not in query.group_by)
    return replace(query, group_by=(*query.group_by, *missing))


def export_filename(name: str, query: UsageQuery, asked_group_by: tuple[str, ...]) -> str:
    """The download's name says what it holds: the report, its filters by name, the months and
    the grouping, e.g. `chargeback-team-vision-project-resnet-2026-10-to-2026-12-by-user`."""
    parts = [name]
    for key, model in FILENAME_FILTERS:
        chosen = getattr(query, f"{key}_id")
        if chosen is not None:
            name = "username" if key == "user" else "name"
            found = model.objects.filter(pk=chosen).values_list(name, flat=True).first()
            parts.append(f"{key}-{slugify(found or '') or chosen}")
    months = f"{query.month_from:%Y-%m}"
    if query.month_to != query.month_from:
        months += f"-to-{query.month_to:%Y-%m}"
    parts.append(months)
    parts.append("by-" + "-".join(asked_group_by))
    return "-".join(parts)


def _export(
    query: UsageQuery, name: str, fmt: str, rows_of: Callable[[UsageQuery], list[dict[str, Any]]]
) -> HttpResponse:
    exported = export_query(query)
    rows = rows_of(exported)
    for row in rows:
        row["currency"] = settings.PORTAL_CURRENCY
    filename = export_filename(name, query, query.group_by)
    columns = _columns(exported)
    if any("idle_share" in row for row in rows):  # a fleet-wide chargeback sharing idle back
        columns[-1:-1] = ["idle_share", "cost_with_idle"]
    return export_response(rows, columns=columns, filename=filename, fmt=fmt)


def _plain(value: Any) -> Any:
    """Decimals as exact strings (DRF's encoder would turn them into floats)."""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def _envelope(query: UsageQuery) -> dict[str, Any]:
    return {
        "currency": settings.PORTAL_CURRENCY,
        "time_zone": settings.BILLING_TIME_ZONE,
        "months": [f"{month:%Y-%m}" for month in query.months],
        "group_by": list(query.group_by),
    }


class UsageView(APIView):
    """GPU-equivalent hours and cost: all teams (finance, admins), a lead's teams, or your own."""

    throttle_classes = [ExportRateThrottle]

    @extend_schema(parameters=[UsageQuerySerializer], responses=REPORT_RESPONSES)
    def get(self, request: Request) -> Any:
        params = UsageQuerySerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        query = params.to_query()
        check_filters(user=request.user, query=query)
        if fmt := params.validated_data.get("export"):
            return _export(
                query, "usage", fmt, lambda exported: usage_rows(user=request.user, query=exported)
            )
        rows = usage_rows(user=request.user, query=query)
        body = {**_envelope(query), "results": rows, "totals": totals(rows)}
        return Response(_plain(body))


class ChargebackView(APIView):
    """Cost per team/project/flavor/pool/month; fleet-wide it adds idle capacity cost and, unless
    `IDLE_COST_SHARING` is off, each team's share of it (`idle_sharing`; rows keyed by team carry
    `idle_share` and `cost_with_idle`)."""

    throttle_classes = [ExportRateThrottle]

    @extend_schema(
        parameters=[ChargebackQuerySerializer],
        responses={(200, "application/json"): ChargebackResponseSerializer, **EXPORT_RESPONSES},
    )
    def get(self, request: Request) -> Any:
        params = ChargebackQuerySerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        query = params.to_query()
        check_filters(user=request.user, query=query)
        if fmt := params.validated_data.get("export"):
            return _export(
                query,
                "chargeback",
                fmt,
                lambda exported: chargeback(user=request.user, query=exported).rows,
            )
        report = chargeback(user=request.user, query=query)
        body = {
            **_envelope(query),
            "results": report.rows,
            "totals": report.totals,
            "idle": report.idle,
            "fleet": report.fleet,
            "idle_sharing": report.idle_sharing.as_dict() if report.idle_sharing else None,
        }
        return Response(_plain(body))


class BudgetViewSet(ScopedModelViewSet):
    """Monthly budgets with this month's burn; the team's lead (or an admin) manages them."""

    queryset = Budget.objects.select_related("team", "project")
    serializer_class = BudgetSerializer
    filterset_fields = ["team", "project", "unit"]
    ordering_fields = ["created_at", "amount"]

    def get_queryset(self) -> QuerySet[Budget]:
        return with_burn(super().get_queryset())

    def _reload(self, budget: Budget) -> Budget:
        return with_burn(Budget.objects.filter(pk=budget.pk)).get()

    def perform_create(self, serializer: BaseSerializer) -> None:
        budget = create_budget(actor=self.request.user, **serializer.validated_data)
        serializer.instance = self._reload(budget)

    def perform_update(self, serializer: BaseSerializer) -> None:
        budget = update_budget(
            actor=self.request.user,
            budget=cast(Budget, serializer.instance),
            **serializer.validated_data,
        )
        serializer.instance = self._reload(budget)

    def perform_destroy(self, instance: Budget) -> None:
        delete_budget(actor=self.request.user, budget=instance)


class PriceViewSet(ScopedModelViewSet):
    """The price list: everyone with a role reads it; platform admins add prices ahead of time."""

    permission_classes = [permissions.IsAuthenticated, PlatformAdminWrites]
    queryset = Price.objects.select_related("flavor")
    serializer_class = PriceSerializer
    filterset_fields = ["flavor", "currency"]
    ordering_fields = ["effective_from"]

    def perform_create(self, serializer: BaseSerializer) -> None:
        serializer.instance = create_price(actor=self.request.user, **serializer.validated_data)

    def perform_update(self, serializer: BaseSerializer) -> None:
        serializer.instance = update_price(
            actor=self.request.user,
            price=cast(Price, serializer.instance),
            **serializer.validated_data,
        )

    def perform_destroy(self, instance: Price) -> None:
        delete_price(actor=self.request.user, price=instance)


class ResourcePriceViewSet(ScopedModelViewSet):
    """CPU, memory and storage prices: everyone with a role reads them; platform admins add
    them ahead of time."""

    permission_classes = [permissions.IsAuthenticated, PlatformAdminWrites]
    queryset = ResourcePrice.objects.all()
    serializer_class = ResourcePriceSerializer
    filterset_fields = ["resource", "currency"]
    ordering_fields = ["effective_from"]

    def perform_create(self, serializer: BaseSerializer) -> None:
        serializer.instance = create_resource_price(
            actor=self.request.user, **serializer.validated_data
        )

    def perform_update(self, serializer: BaseSerializer) -> None:
        serializer.instance = update_resource_price(
            actor=self.request.user,
            price=cast(ResourcePrice, serializer.instance),
            **serializer.validated_data,
        )

    def perform_destroy(self, instance: ResourcePrice) -> None:
        delete_resource_price(actor=self.request.user, price=instance)


class StatementViewSet(ScopedReadOnlyViewSet):
    """Closed monthly statements: finance and admins close and read all, leads read their own.

    `?export=csv|xlsx` on a statement downloads its frozen lines.
    """

    queryset = Statement.objects.select_related("team", "closed_by").prefetch_related("lines")
    serializer_class = StatementSerializer
    throttle_classes = [ExportRateThrottle]
    filterset_fields = ["team"]
    ordering_fields = ["period", "closed_at"]

    @extend_schema(
        parameters=[ExportSerializer],
        responses={(200, "application/json"): StatementSerializer, **EXPORT_RESPONSES},
    )
    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Any:
        params = ExportSerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        statement = self.get_object()
        if fmt := params.validated_data.get("export"):
            filename = f"statement-{statement.team.slug}-{statement.period:%Y-%m}"
            return export_response(
                statement_rows(statement),
                columns=STATEMENT_COLUMNS,
                filename=filename,
                fmt=fmt,
            )
        return Response(self.get_serializer(statement).data)

    @extend_schema(request=StatementCloseSerializer, responses={201: StatementSerializer})
    @action(detail=False, methods=["post"])
    def close(self, request: Request) -> Response:
        params = StatementCloseSerializer(data=request.data, context={"request": request})
        params.is_valid(raise_exception=True)
        statement, created = close_statement(
            actor=request.user,
            team=params.validated_data["team"],
            month=params.validated_data["month"],
        )
        statement = self.get_queryset().get(pk=statement.pk)
        code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
        return Response(self.get_serializer(statement).data, status=code)


class EfficiencyView(APIView):
    """Allocated vs active GPU-hours ("waste") of recent work, per request, project or team."""

    @extend_schema(parameters=[EfficiencyQuerySerializer], responses={200: OpenApiTypes.OBJECT})
    def get(self, request: Request) -> Any:
        params = EfficiencyQuerySerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        rows = efficiency_rows(user=request.user, **params.validated_data)
        return Response(_plain({**params.validated_data, "results": rows}))


class RequestEfficiencyView(APIView):
    """One request's efficiency and, once it finished, a right-sizing suggestion."""

    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    def get(self, request: Request, pk: int) -> Any:
        gpu_request = get_object_or_404(
            GpuRequest.objects.visible_to(request.user).select_related("flavor"), pk=pk
        )
        return Response(_plain(request_efficiency(gpu_request)))
