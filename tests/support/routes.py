"""The one walk over the URL resolver, shared by the route-coverage and the isolation tests.

Every named route, with its full pattern, the names of its URL arguments and the methods its
view answers. A route with arguments in its URL is an *object route*.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import models
from django.urls import URLPattern, URLResolver, get_resolver

UNSCOPED_PREFIXES = ("admin/",)  # Django admin: platform admins only, guarded by is_staff.

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


def _walk(patterns: Sequence[object], prefix: str) -> Iterator[tuple[str, str, Any]]:
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


def all_routes(patterns: Sequence[object] | None = None) -> list[Route]:
    """Every named route outside the Django admin (of the project's URLs unless given)."""
    routes = []
    for name, pattern, callback in _walk(patterns or get_resolver().url_patterns, ""):
        if pattern.startswith(UNSCOPED_PREFIXES):
            continue
        kwarg_names = tuple(a or b for a, b in _GROUP.findall(pattern))
        routes.append(Route(name, pattern, kwarg_names, callback, _methods(callback)))
    return routes


def object_routes(patterns: Sequence[object] | None = None) -> list[Route]:
    return [route for route in all_routes(patterns) if route.kwarg_names]
