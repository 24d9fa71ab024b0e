"""One error shape for the whole API: {"error": {"code", "message", "fields"}}."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.serializers import as_serializer_error
from rest_framework.views import exception_handler

from tenants.errors import DomainError, fields_message


def error_body(code: str, message: str, fields: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "fields": fields or {}}}


def _flatten(detail: Any) -> Any:
    """DRF's nested ErrorDetail lists → plain strings (first message per field)."""
    if isinstance(detail, dict):
        return {key: _flatten(value) for key, value in detail.items()}
    if isinstance(detail, list):
        if detail and all(isinstance(item, str) for item in detail):
            return " ".join(str(item) for item in detail)
        return [_flatten(item) for item in detail]
    return str(detail)


def portal_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, DomainError):
        return Response(error_body(exc.code, exc.message, exc.fields), status=exc.status_code)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    elif isinstance(exc, DjangoValidationError):
        exc = exceptions.ValidationError(detail=as_serializer_error(exc))

    response = exception_handler(exc, context)
    if response is None or not isinstance(exc, exceptions.APIException):
        return response
    if isinstance(exc, exceptions.ValidationError):
        fields = _flatten(exc.detail) if isinstance(exc.detail, dict) else {}
        non_field = fields.pop("non_field_errors", None) if isinstance(fields, dict) else None
        if isinstance(exc.detail, list):
            non_field = _flatten(exc.detail)
        message = str(non_field) if non_field else fields_message(fields)
        response.data = error_body("invalid", message, fields)
    else:
        codes = exc.get_codes()
        code = codes if isinstance(codes, str) else exc.default_code
        response.data = error_body(str(code), str(exc.detail))
    return response


def _wants_json(request: HttpRequest) -> bool:
    return request.path.startswith("/api/")


SERVER_ERROR_MESSAGE = "Something went wrong on our side; it has been logged."
# The code and message of an error answered outside the API's views (an unknown path, a failure
# in a plain view or a middleware); any other status gets its reason phrase.
STATUS_ERRORS: dict[int, tuple[str, str]] = {
    400: ("bad_request", "Bad request."),
    403: ("permission_denied", "You do not have permission to perform this action."),
    404: ("not_found", "Not found."),
    405: ("method_not_allowed", "Method not allowed."),
    500: ("server_error", SERVER_ERROR_MESSAGE),
}


def not_found_view(request: HttpRequest, exception: Exception | None = None) -> Any:
    """Unknown URLs: the API's error shape under /api/, the portal's page elsewhere."""
    if _wants_json(request):
        return JsonResponse(error_body(*STATUS_ERRORS[404]), status=status.HTTP_404_NOT_FOUND)
    from django.views.defaults import page_not_found

    return page_not_found(request, exception or Http404())


def server_error_view(request: HttpRequest) -> Any:
    """An unexpected failure: no stack trace, the error shape under /api/."""
    if _wants_json(request):
        return JsonResponse(
            error_body(*STATUS_ERRORS[500]), status=status.HTTP_500_INTERNAL_SERVER_ERROR
        )
    from django.views.defaults import server_error

    return server_error(request)


class ApiErrorShapeMiddleware:
    """Under /api/, every error answers the error shape, whatever DEBUG says.

    The API's views answer through `portal_exception_handler`, and with DEBUG off Django's
    handler404/handler500 are the views above. What is left is Django's own pages: with DEBUG on
    an unknown path or an unexpected exception is a debug page, and a plain view or a middleware
    may answer HTML. Such a page is rewritten in place, so Django's logging (the traceback of a
    500 included) and its test client see the same response as before.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (
            response.status_code < 400
            or not _wants_json(request)
            or response.streaming
            or isinstance(response, Response)  # the API's own, in any renderer
            or response.get("Content-Type", "").startswith("application/json")
        ):
            return response
        code, message = STATUS_ERRORS.get(
            response.status_code,
            (response.reason_phrase.lower().replace(" ", "_"), f"{response.reason_phrase}."),
        )
        response.content = json.dumps(error_body(code, message)).encode()
        response["Content-Type"] = "application/json"
        if response.has_header("Content-Length"):
            response["Content-Length"] = str(len(response.content))
        return response


RETRY_AFTER_SECONDS = 5


def service_unavailable_response(request: HttpRequest) -> HttpResponse:
    """A 503 with Retry-After: the error shape under /api/, a short page elsewhere."""
    if _wants_json(request):
        response: HttpResponse = JsonResponse(
            error_body(
                "unavailable",
                "A service the portal relies on is not answering. Try again in a few seconds.",
            ),
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
        )
    else:
        response = render(request, "503.html", status=status.HTTP_503_SERVICE_UNAVAILABLE)
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response
