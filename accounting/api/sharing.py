"""`GET /api/v1/reports/sharing/`: the sharing report of every pool (or one) over a period."""

from __future__ import annotations

from dataclasses import asdict
from datetime import date
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounting.forms import SharingQueryForm
from accounting.selectors.sharing import SharingPeriod, pool_sharing, require_sharing_reader
from accounting.sharing_report import PoolSharing, Thresholds
from tenants.errors import invalid_fields


def _plain(value: Any) -> Any:
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def report_body(period: SharingPeriod, pools: list[PoolSharing]) -> dict[str, Any]:
    """The report as JSON: the period, the thresholds the verdicts use, one entry per pool."""
    return {
        "from": period.first.isoformat(),
        "to": period.last.isoformat(),
        "period_start": period.start.isoformat(),
        "period_end": period.end.isoformat(),
        "thresholds": asdict(Thresholds()),
        "pools": [{k: _plain(v) for k, v in asdict(pool).items()} for pool in pools],
    }


def valid_query(data: Any) -> SharingQueryForm:
    """The query's form, or a 400 naming the fields at fault."""
    form = SharingQueryForm(data)
    if not form.is_valid():
        fields = {name: " ".join(str(e) for e in errors) for name, errors in form.errors.items()}
        raise invalid_fields(fields)
    return form


class SharingReportView(APIView):
    """Does sharing pay? Per pool: GE sold per card, activity, memory headroom, stranded
    GPU-hours, the slowdown and jitter of shared work, and a verdict (finance and admins)."""

    @extend_schema(
        parameters=[
            OpenApiParameter("pool", OpenApiTypes.INT, description="One pool's id; every pool."),
            OpenApiParameter("from", OpenApiTypes.DATE, description="First day (30 days ago)."),
            OpenApiParameter("to", OpenApiTypes.DATE, description="Last day, included (today)."),
        ],
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request) -> Response:
        require_sharing_reader(request.user)
        form = valid_query(request.query_params)
        period = form.period()
        pools = pool_sharing(period=period, pool_id=form.pool_id())
        return Response(report_body(period, pools))
