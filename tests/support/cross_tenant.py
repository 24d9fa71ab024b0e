"""Which object routes have a cross-tenant test.

The checks themselves are an `ApiContract`'s (tests/support/api_contract.py) or a page test's.
`covers(*route_names)` declares which routes a test proves isolated (an `ApiContract` declares
its own); tests/test_cross_tenant_coverage.py walks the URL resolver and fails for any object
route nobody declared.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

COVERED_ROUTES: set[str] = set()

F = TypeVar("F", bound=Callable[..., Any])


def covers(*route_names: str) -> Callable[[F], F]:
    def mark(test: F) -> F:
        COVERED_ROUTES.update(route_names)
        return test

    return mark


def uncovered(routes: Iterable[Any]) -> list[str]:
    """The names of `routes` (tests.support.routes.Route) that no isolation test declares."""
    return sorted({route.name for route in routes} - COVERED_ROUTES)


def result_ids(response: Any) -> set[Any]:
    body = response.json()
    rows = body["results"] if isinstance(body, dict) and "results" in body else body
    return {row["id"] for row in rows}
