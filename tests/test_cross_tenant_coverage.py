"""Every route that takes an object id must have a cross-tenant test declared with `covers()`."""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Iterator, Sequence

from django.urls import URLPattern, URLResolver, get_resolver

import tests
from tests.support.cross_tenant import COVERED_ROUTES

OBJECT_ROUTE = re.compile(r"<(?:int:|str:)?(?:pk|token_key|[a-z_]+_id)>|\(\?P<")
UNSCOPED_PREFIXES = ("admin/",)  # Django admin: platform admins only, guarded by is_staff.


def _walk(patterns: Sequence[object], prefix: str = "") -> Iterator[tuple[str, str]]:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _walk(pattern.url_patterns, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern) and pattern.name:
            yield pattern.name, prefix + str(pattern.pattern)


def _import_all_test_modules() -> None:
    for module in pkgutil.walk_packages(tests.__path__, prefix="tests."):
        importlib.import_module(module.name)


def test_every_object_route_has_a_cross_tenant_test() -> None:
    _import_all_test_modules()
    object_routes = {
        name
        for name, route in _walk(get_resolver().url_patterns)
        if OBJECT_ROUTE.search(route) and not route.startswith(UNSCOPED_PREFIXES)
    }
    assert object_routes, "the resolver walk found no object routes: the walk is broken"
    missing = sorted(object_routes - COVERED_ROUTES)
    assert not missing, f"object routes without a cross-tenant test: {missing}"
