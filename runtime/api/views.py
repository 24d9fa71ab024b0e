"""A request's logs and events: `GET /api/v1/requests/{id}/logs/` and `.../events/`."""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse, StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import APIException, Throttled
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response

from runtime.services import inspection, streams
from scheduling.models import GpuRequest
from tenants.api.base import ScopedViewSetMixin

DEFAULT_TAIL = 200


class ClusterUnavailable(APIException):
    status_code = 503
    default_detail = "The cluster cannot be read now."
    default_code = "cluster_unavailable"


class TooManyStreams(Throttled):
    default_code = "too_many_streams"


class WorkloadEventSerializer(serializers.Serializer):
    at = serializers.DateTimeField(allow_null=True)
    source = serializers.ChoiceField(choices=["portal", "cluster"])  # type: ignore[assignment]
    type = serializers.CharField()
    reason = serializers.CharField()
    message = serializers.CharField()
    object = serializers.CharField()
    actor = serializers.CharField(allow_null=True)
    count = serializers.IntegerField()


class WorkloadEventsSerializer(serializers.Serializer):
    results = WorkloadEventSerializer(many=True)
    cluster_error = serializers.CharField(allow_null=True)


class RequestInspectView(ScopedViewSetMixin, GenericAPIView):
    """Base for reads about one request the caller may see (another tenant's is 404)."""

    queryset = GpuRequest.objects.select_related("project")
    serializer_class = WorkloadEventsSerializer  # for the schema; views answer directly


def _tail(request: Request) -> int:
    raw = request.query_params.get("tail") or str(DEFAULT_TAIL)
    if not (raw.isascii() and raw.isdigit()):
        raise serializers.ValidationError({"tail": "A whole number of lines, 0 or more."})
    return min(int(raw), inspection.MAX_TAIL)


def _follow(request: Request) -> bool:
    raw = request.query_params.get("follow", "")
    if raw not in ("", "0", "1", "false", "true"):
        raise serializers.ValidationError({"follow": "true or false (1 or 0)."})
    return raw in ("1", "true")


class RequestLogsView(RequestInspectView):
    opens_streams = True  # `follow=1`: at most STREAMS_PER_USER at a time (429 beyond)

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "tail",
                {"type": "integer", "minimum": 0},
                description="How many last lines (default 200; capped at the most kept).",
            ),
            OpenApiParameter("follow", bool, description="1: keep streaming new lines."),
        ],
        responses={(200, "text/plain"): OpenApiTypes.STR},
    )
    def get(self, request: Request, pk: str | None = None) -> Any:
        """The current attempt's log as text, oldest line first; lines carry `[pod]` when the
        attempt has several pods. `follow=1` streams new lines until the work stops; one person
        holds at most STREAMS_PER_USER such streams at a time (one more is 429)."""
        gpu_request = self.get_object()
        tail = _tail(request)
        if request.method == "GET" and _follow(request):
            try:
                slot = streams.take_stream_slot(holder=request.user)
            except streams.TooManyStreams as error:
                raise TooManyStreams(wait=error.retry_after_seconds, detail=str(error)) from error
            # An async iterator: under ASGI it waits on the event loop, not in a worker.
            response = StreamingHttpResponse(
                inspection.follow_log(gpu_request, tail=tail, slot=slot),
                content_type="text/plain; charset=utf-8",
            )
            response["X-Accel-Buffering"] = "no"  # proxies pass lines on as they come
            response["Cache-Control"] = "no-store"
            return response
        try:
            lines = inspection.log_lines(gpu_request, tail=tail)
        except inspection.InspectUnavailable as error:
            raise ClusterUnavailable(str(error)) from error
        with_pod = len({line["pod"] for line in lines}) > 1
        body = "".join(inspection.format_line(line, with_pod=with_pod) for line in lines)
        return HttpResponse(body, content_type="text/plain; charset=utf-8")


class RequestEventsView(RequestInspectView):
    @extend_schema(responses=WorkloadEventsSerializer)
    def get(self, request: Request, pk: str | None = None) -> Response:
        """The cluster's events about the current attempt and the portal's audit events about
        the request, merged by time."""
        return Response(inspection.request_events(self.get_object()))
