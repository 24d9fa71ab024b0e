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


def invalid_fields(fields: dict[str, Any]) -> DomainError:
    """A 400 whose message names each field at fault and why, e.g. "team: No such team."."""
    return DomainError("invalid", fields_message(fields), fields=fields)


def fields_message(fields: dict[str, Any]) -> str:
    """One line for people: every field's name with its reason, in order."""
    parts = [f"{name}: {_reason(text)}" for name, text in fields.items()]
    return " ".join(parts) or "Invalid input."


def _reason(text: Any) -> str:
    if isinstance(text, dict):
        return "; ".join(f"{key}: {_reason(value)}" for key, value in text.items())
    if isinstance(text, list):
        return " ".join(_reason(item) for item in text)
    reason = str(text).strip()
    return reason if reason.endswith((".", "!", "?")) else f"{reason}."


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
