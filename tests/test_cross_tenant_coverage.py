"""Every route that takes an object id must have a cross-tenant test: one declared with
`covers()`, or an `ApiContract` (tests/support/api_contract.py), which covers its routes."""

from __future__ import annotations

import importlib
import pkgutil

from django.http import HttpRequest, HttpResponse
from django.urls import path

import tests
from tests.support.cross_tenant import COVERED_ROUTES, uncovered
from tests.support.routes import object_routes


def _import_all_test_modules() -> None:
    for module in pkgutil.walk_packages(tests.__path__, prefix="tests."):
        importlib.import_module(module.name)


def test_every_object_route_has_a_cross_tenant_test() -> None:
    _import_all_test_modules()
    routes = object_routes()
    assert routes, "the resolver walk found no object routes: the walk is broken"
    missing = uncovered(routes)
    assert not missing, f"object routes without a cross-tenant test: {missing}"


def test_a_new_object_route_without_a_test_is_reported() -> None:
    def view(request: HttpRequest) -> HttpResponse:
        raise AssertionError("never called")

    routes = object_routes([path("api/v1/gadgets/<int:pk>/", view, name="gadget-detail")])
    assert [route.name for route in routes] == ["gadget-detail"]
    assert uncovered(routes) == ["gadget-detail"]
    assert "gadget-detail" not in COVERED_ROUTES
