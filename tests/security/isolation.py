"""The route walk behind the tenant-isolation tests: every route of the URL resolver, classified.

A route with object ids in its URL is an *object route*; the walk finds which model each id
names (the viewset's queryset for API routes, `ROUTE_MODELS` for the others) and which
object of team B to aim at. A route the walk cannot place fails the test with a message saying
what to add, so a new route is never silently left out.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import models
from django.urls import URLPattern, URLResolver, get_resolver
from knox.models import AuthToken

from accounting.models import Budget
from scheduling.models import Flavor, GpuRequest
from tenants.models import Project

UNSCOPED_PREFIXES = ("admin/",)  # Django admin: platform admins only, guarded by is_staff.
# Operator endpoints, not tenant-facing: /metrics is loopback/bearer only and labels by team on
# purpose; the login and logout pages hold no tenant data.
# The API schema and its viewer describe endpoints, not data (the viewer echoes its query).
OPERATOR_ROUTES = {"metrics", "readyz", "healthz", "login", "logout", "schema", "api-docs"}

# Page views and plain API views have no queryset to read: which model the id in their URL names.
ROUTE_MODELS: dict[str, type[models.Model]] = {
    "gpu-request-page": GpuRequest,
    "gpu-request-efficiency-page": GpuRequest,
    "gpu-request-efficiency": GpuRequest,
    "gpu-request-cancel-page": GpuRequest,
    "gpu-request-govern-page": GpuRequest,
    "approval-decide": GpuRequest,
    "project-quota-set": Project,
    "api-token-revoke": AuthToken,
    "budget-edit": Budget,
    "budget-delete": Budget,
}
# URL arguments that are not object ids: a value every route accepts.
NON_OBJECT_KWARGS = {"action": "extend", "decision": "approve"}
# URL arguments that name an object other than the route's main one.
KWARG_MODELS: dict[str, type[models.Model]] = {"project_id": Project, "flavor_id": Flavor}

_GROUP = re.compile(r"\(\?P<(\w+)>|<(?:\w+:)?(\w+)>")


@dataclass(frozen=True)
class Route:
    name: str
    pattern: str
    kwarg_names: tuple[str, ...]
    callback: Any
    methods: tuple[str, ...] = field(default=())

    @property
    def is_api(self) -> bool:
        return self.pattern.startswith("api/")

    @property
    def viewset_model(self) -> type[models.Model] | None:
        cls = getattr(self.callback, "cls", None)
        queryset = getattr(cls, "queryset", None)
        if queryset is not None:
            return queryset.model
        serializer = getattr(cls, "serializer_class", None)
        meta = getattr(serializer, "Meta", None)
        return getattr(meta, "model", None)


def _walk(patterns: Sequence[object], prefix: str = "") -> Iterator[tuple[str, str, Any]]:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _walk(pattern.url_patterns, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern) and pattern.name:
            yield pattern.name, prefix + str(pattern.pattern), pattern.callback


def _methods(callback: Any) -> tuple[str, ...]:
    actions = getattr(callback, "actions", None)
    if actions:
        return tuple(method for method in actions if method != "put")  # PUT behaves as PATCH
    cls = getattr(callback, "cls", None)
    if cls is not None:
        names = getattr(cls, "http_method_names", ())
        offered = ("get", "post", "patch", "delete")
        return tuple(m for m in offered if hasattr(cls, m) and m in names)
    return ("get", "post")  # a function view: try both, 405 says which it refuses


def all_routes() -> list[Route]:
    routes = []
    for name, pattern, callback in _walk(get_resolver().url_patterns):
        if pattern.startswith(UNSCOPED_PREFIXES):
            continue
        kwarg_names = tuple(a or b for a, b in _GROUP.findall(pattern))
        routes.append(Route(name, pattern, kwarg_names, callback, _methods(callback)))
    return routes


def object_routes() -> list[Route]:
    return [route for route in all_routes() if route.kwarg_names]


def collection_routes() -> list[Route]:
    """Routes without ids that answer GET: lists, pages, exports, fragments."""
    return [
        route
        for route in all_routes()
        if not route.kwarg_names and route.name not in OPERATOR_ROUTES and "get" in route.methods
    ]


def route_model(route: Route) -> type[models.Model]:
    model = ROUTE_MODELS.get(route.name) or (route.viewset_model if route.is_api else None)
    if model is None:
        raise LookupError(
            f"the isolation walk cannot tell which model route {route.name!r} ({route.pattern}) "
            "addresses: add it to ROUTE_MODELS in tests/security/isolation.py"
        )
    return model
