"""What the scheduling services share: the field error and the decider check."""

from __future__ import annotations

from scheduling.models import GpuRequest
from tenants.errors import DomainError, ForbiddenError
from tenants.models import scope_of
from tenants.scope import Actor


def invalid_field(field: str, message: str, code: str = "invalid") -> DomainError:
    """A 400 that names the field at fault."""
    return DomainError(code, message, fields={field: message})


def require_decider(actor: Actor, request: GpuRequest) -> None:
    """Only the team's lead (or a platform admin) decides on a team's request."""
    if not scope_of(actor).is_lead_of(request.team_id):
        raise ForbiddenError("forbidden", "Only the team's lead may approve or reject requests.")
