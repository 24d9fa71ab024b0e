"""The OpenAPI schema: every status an operation can answer, and the constraints it enforces.

drf-spectacular documents an operation's success; its errors come from pieces shared by many
operations (authentication, roles, the scoped lookup, validation, services' `DomainError`,
throttles, the cache-outage middleware). `PortalAutoSchema` adds them per operation from what
the operation declares, each in the one error shape of `tenants.api.errors`. The hook
`document_request_constraints` writes down what validation refuses that a type cannot say.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import ComponentRegistry, ResolvedComponent

from tenants.api.base import FixedOnceCreatedMixin

ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "The one error shape of the API.",
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "code": {"type": "string", "description": "Stable, for programs."},
                "message": {"type": "string", "description": "For people."},
                "fields": {
                    "type": "object",
                    "additionalProperties": {},
                    "description": "Per input field, what is wrong with it (may be empty).",
                },
            },
            "required": ["code", "message", "fields"],
        }
    },
    "required": ["error"],
}
RETRY_AFTER = {
    "Retry-After": {
        "schema": {"type": "integer"},
        "description": "Seconds to wait before trying again.",
    }
}
ERROR_DESCRIPTIONS = {
    400: "The input is invalid (see `fields`), or a rule of the product refuses it.",
    401: "No valid credentials: sign in or send `Authorization: Token <token>`.",
    403: "The caller's role may not do this.",
    404: "No such object within the caller's reach, or no such page.",
    409: "The object is not in a state that allows this.",
    429: "Too many requests: wait `Retry-After` seconds.",
    503: "A service the portal relies on is not answering: wait `Retry-After` seconds.",
}
WRITE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}


class PortalAutoSchema(AutoSchema):
    """drf-spectacular's AutoSchema plus the error responses each operation can answer."""

    def get_operation(
        self,
        path: str,
        path_regex: str,
        path_prefix: str,
        method: str,
        registry: ComponentRegistry,
    ) -> dict[str, Any] | None:
        operation = super().get_operation(path, path_regex, path_prefix, method, registry)
        if operation is None:
            return None
        error = ResolvedComponent(
            name="Error", type=ResolvedComponent.SCHEMA, schema=ERROR_SCHEMA, object="Error"
        )
        registry.register_on_missing(error)
        responses = operation["responses"]
        for status in self.error_statuses(operation):
            response: dict[str, Any] = {
                "description": ERROR_DESCRIPTIONS[status],
                "content": {"application/json": {"schema": error.ref}},
            }
            if status in (429, 503):
                response["headers"] = RETRY_AFTER
            responses.setdefault(str(status), response)
        return operation

    def get_request_serializer(self) -> Any:
        """The request body; a PATCH leaves out the fields fixed once created."""
        serializer = super().get_request_serializer()
        if self.method == "PATCH" and isinstance(serializer, FixedOnceCreatedMixin):
            serializer.fix_once_created()  # a fresh instance, made for this operation
        return serializer

    def error_statuses(self, operation: dict[str, Any]) -> list[int]:
        """Which errors this operation can answer, from what it takes and what guards it.

        1. 400: it takes a body or query parameters (serializer and filter validation), or it
           writes (a service's `DomainError`, e.g. a resubmit the quota refuses).
        2. 401 and 403: it needs a signed-in caller; services check the caller's role on any
           action, and a role may be refused a read (the audit trail, reports).
        3. 404: it names an object in its path (other tenants' objects are 404), or it is a
           paginated list (a page past the end).
        4. 409: it writes; services refuse actions the object's state does not allow.
        5. 429: it is throttled, or it opens streams, capped per person (`opens_streams`).
        6. 503: always; the cache-outage middleware answers it when Redis is unreachable.
        """
        statuses = []
        parameters = operation.get("parameters", [])
        if (
            "requestBody" in operation
            or any(p["in"] == "query" for p in parameters)
            or self.method in WRITE_METHODS
        ):
            statuses.append(400)
        if {} not in operation.get("security", [{}]):
            statuses += [401, 403]
        if any(p["in"] == "path" for p in parameters) or any(
            p["name"] == "page" and p["in"] == "query" for p in parameters
        ):
            statuses.append(404)
        if self.method in WRITE_METHODS:
            statuses.append(409)
        if self.view.get_throttles() or getattr(self.view, "opens_streams", False):
            statuses.append(429)
        statuses.append(503)
        return statuses


NO_NUL = "^[^\\x00]*$"
# Text fields strip surrounding whitespace and then refuse a blank value, and no text may hold
# NUL (PostgreSQL cannot store it).
NOT_BLANK_NO_NUL = "^[^\\x00]*[^\\s\\x00][^\\x00]*$"


def _is_free_text(schema: dict[str, Any]) -> bool:
    return schema.get("type") == "string" and not {"enum", "format", "pattern"} & schema.keys()


def document_request_constraints(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """Postprocessing hook: what request validation refuses that the types do not say.

    1. An optional query parameter sent empty (`?team=`) counts as left out, as DRF's and
       django-filter's forms read it; lists excepted (an empty item is a bad choice).
    2. Free text refuses NUL, and text that may not be blank refuses whitespace alone.
    """
    for path in result.get("paths", {}).values():
        for operation in path.values():
            for parameter in operation.get("parameters", []):
                schema = parameter.get("schema", {})
                if parameter["in"] != "query":
                    continue
                if not parameter.get("required") and schema.get("type") != "array":
                    parameter["allowEmptyValue"] = True
                if _is_free_text(schema) and parameter["name"] != "ordering":
                    schema["pattern"] = NO_NUL  # `ordering` ignores what it does not know
    for name, component in result.get("components", {}).get("schemas", {}).items():
        if not name.endswith("Request"):
            continue
        for field in component.get("properties", {}).values():
            if _is_free_text(field):
                field["pattern"] = NOT_BLANK_NO_NUL if field.get("minLength") else NO_NUL
            items = field.get("items") if field.get("type") == "array" else None
            if items and _is_free_text(items):
                items["pattern"] = NO_NUL
            values = field.get("additionalProperties")
            if isinstance(values, dict) and _is_free_text(values):
                values["pattern"] = NO_NUL
    return result
