"""The portal's URLs plus two views that fail, to see what a visitor gets from an error."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import path

from portal.urls import urlpatterns as portal_urlpatterns


def boom(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("secret-internal-detail: connection string postgres://user:pw@db")


urlpatterns = [
    path("boom/", boom),
    path("api/v1/boom/", boom),
    *portal_urlpatterns,
]

handler404 = "tenants.api.errors.not_found_view"
handler500 = "tenants.api.errors.server_error_view"
