"""The one error type of the domain, mapped to HTTP by the API's exception handler."""

from __future__ import annotations

from typing import Any


class DomainError(Exception):
    """A rule of the product refused an action; `code` is stable, `message` is for people."""

    status_code = 400

    def __init__(self, code: str, message: str, *, fields: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.fields = fields or {}


class ConflictError(DomainError):
    """The object is not in a state that allows the action (HTTP 409)."""

    status_code = 409


class ForbiddenError(DomainError):
    """The actor's role may not take this action on an object it can see (HTTP 403)."""

    status_code = 403
