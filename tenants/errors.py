"""The one error type of the domain, mapped to HTTP by the API's exception handler."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django import forms


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


def show_on_form(form: forms.BaseForm, error: DomainError) -> None:
    """A service's refusal on the form fields it names, else above the form.

    Pages call the same services as the API; the fields a `DomainError` names are the
    service's argument names, which the pages' forms share.
    """
    placed = False
    for name, message in error.fields.items():
        if name in form.fields:
            form.add_error(name, str(message) or error.message)
            placed = True
    if not placed:
        form.add_error(None, error.message)
