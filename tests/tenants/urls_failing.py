"""The portal's URLs plus API views that fail unexpectedly, to see what a client gets back."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import path
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.urls import handler404, handler500
from portal.urls import urlpatterns as portal_urlpatterns

SECRET = "secret-internal-detail: postgres://user:pw@db"


class FailingApiView(APIView):
    permission_classes = [AllowAny]

    def get(self, request: Request) -> Response:
        raise RuntimeError(SECRET)


def failing_plain_view(request: HttpRequest) -> HttpResponse:
    raise RuntimeError(SECRET)


urlpatterns = [
    path("api/v1/failing/", FailingApiView.as_view()),
    path("api/v1/failing-plain/", failing_plain_view),
    *portal_urlpatterns,
]

__all__ = ["handler404", "handler500", "urlpatterns"]
