"""The shared cross-tenant check every object endpoint reuses.

`covers(*route_names)` declares which routes a test proves isolated (an `ApiContract` declares
its own); tests/test_cross_tenant_coverage.py walks the URL resolver and fails for any object
route nobody declared.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from django.urls import reverse
from rest_framework.test import APIClient

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


def assert_other_tenant_hidden(
    client: APIClient,
    *,
    detail_route: str,
    pk: Any,
    list_route: str | None = None,
    write_payload: dict[str, Any] | None = None,
    action_routes: Iterable[str] = (),
    list_filters: Iterable[dict[str, Any]] = (),
) -> None:
    """Another tenant's object is 404 to read, change, delete or act on, and never listed."""
    url = reverse(detail_route, kwargs={"pk": pk})
    for method in ("get", "patch", "delete"):
        response = getattr(client, method)(url, write_payload or {}, format="json")
        if response.status_code == 405 and method != "get":
            continue  # the route offers no such write to anyone: nothing to leak
        assert response.status_code == 404, f"{method.upper()} {url}: {response.status_code}"
        assert response.json()["error"]["code"] == "not_found"
    for action in action_routes:
        response = client.post(reverse(action, kwargs={"pk": pk}), {}, format="json")
        assert response.status_code == 404, f"POST {action}: {response.status_code}"
    if list_route is not None:
        for query in [{}, *list_filters]:
            response = client.get(reverse(list_route), query)
            assert response.status_code in (200, 400), response.content
            if response.status_code == 200:
                assert pk not in result_ids(response), f"{list_route}?{query} lists {pk}"
