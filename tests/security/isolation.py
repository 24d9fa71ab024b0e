"""What the tenant-isolation tests aim at on each route of the shared walk (tests/support/routes).

For an *object route* (ids in its URL) this finds which model each id
names (the viewset's queryset for API routes, `ROUTE_MODELS` for the others) and which
object of team B to aim at. A route the walk cannot place fails the test with a message saying
what to add, so a new route is never silently left out.
"""

from __future__ import annotations

from django.db import models
from knox.models import AuthToken

from accounting.models import Budget, Statement
from portal.manage import SECTIONS
from scheduling.models import Flavor, GpuRequest, Node, NodePool, Tier
from tenants.models import Notification, Project
from tests.support.routes import Route, all_routes

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
    "gpu-request-status-page": GpuRequest,
    "gpu-request-keep-alive-page": GpuRequest,
    "gpu-request-resubmit-page": GpuRequest,
    "gpu-request-save-template-page": GpuRequest,
    "gpu-request-govern-page": GpuRequest,
    "approval-decide": GpuRequest,
    "project-quota-set": Project,
    "project-data-page": Project,
    "api-token-revoke": AuthToken,
    "budget-edit": Budget,
    "budget-delete": Budget,
    "workload-auth": GpuRequest,
    "workload-connect": GpuRequest,
    "gpu-request-inspect-page": GpuRequest,
    "notification-read-page": Notification,
    "statement-page": Statement,
    "fleet-pool-page": NodePool,
    "fleet-node-page": Node,
}
# The external auth check of workload Ingresses answers 403 to anyone who may not open the
# workload, existing or not (ingress-nginx turns a 404 into a 500 for the browser), and 401 to a
# caller without the workload's own cookie, which a portal session is not; neither tells
# anything about other tenants (tests/runtime/test_connect.py).
FORWARD_AUTH_ROUTES = {"workload-auth"}
# The fleet settings pages: a section's edit and delete routes name an object of its model.
ROUTE_MODELS |= {
    route: section.model
    for section in SECTIONS.values()
    for route in (section.edit_route, section.delete_route)
}
ROUTE_MODELS["manage-reclaim-policy-edit"] = Tier
# URL arguments that are not object ids: a value every route accepts.
NON_OBJECT_KWARGS = {"action": "extend", "decision": "approve"}
# URL arguments that name an object other than the route's main one.
KWARG_MODELS: dict[str, type[models.Model]] = {"project_id": Project, "flavor_id": Flavor}


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
