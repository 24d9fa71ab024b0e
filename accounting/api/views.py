"""`/api/v1/usage/` and `/api/v1/chargeback/`: the same selectors as the dashboards."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.conf import settings
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounting.api.serializers import ChargebackQuerySerializer, UsageQuerySerializer
from accounting.exports import XLSX_CONTENT_TYPE, rows_to_csv, rows_to_xlsx
from accounting.selectors import UsageQuery, chargeback, check_filters, totals, usage_rows


def _columns(query: UsageQuery) -> list[str]:
    columns: list[str] = []
    for key in query.group_by:
        columns += [key] if key in ("month", "day") else [f"{key}_id", key]
    return [*columns, "gpu_hours", "cost", "currency"]


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


def _export(rows: list[dict[str, Any]], query: UsageQuery, name: str, fmt: str) -> HttpResponse:
    for row in rows:
        row["currency"] = settings.PORTAL_CURRENCY
    filename = f"{name}-{query.month_from:%Y-%m}-{query.month_to:%Y-%m}"
    return export_response(rows, columns=_columns(query), filename=filename, fmt=fmt)


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

    @extend_schema(parameters=[UsageQuerySerializer], responses={200: OpenApiTypes.OBJECT})
    def get(self, request: Request) -> Any:
        params = UsageQuerySerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        query = params.to_query()
        check_filters(user=request.user, query=query)
        rows = usage_rows(user=request.user, query=query)
        if fmt := params.validated_data.get("export"):
            return _export(rows, query, "usage", fmt)
        body = {**_envelope(query), "results": rows, "totals": totals(rows)}
        return Response(_plain(body))


class ChargebackView(APIView):
    """Cost per team/project/flavor/pool/month; fleet-wide it adds idle capacity cost."""

    @extend_schema(parameters=[ChargebackQuerySerializer], responses={200: OpenApiTypes.OBJECT})
    def get(self, request: Request) -> Any:
        params = ChargebackQuerySerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        query = params.to_query()
        check_filters(user=request.user, query=query)
        report = chargeback(user=request.user, query=query)
        if fmt := params.validated_data.get("export"):
            return _export(report.rows, query, "chargeback", fmt)
        body = {
            **_envelope(query),
            "results": report.rows,
            "totals": report.totals,
            "idle": report.idle,
            "fleet": report.fleet,
        }
        return Response(_plain(body))
