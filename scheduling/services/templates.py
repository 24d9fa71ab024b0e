"""Writes of saved request templates, and submitting a finished request's body again.

A template is a user's own, or shared with their team; the team's lead (or a platform admin)
writes shared ones. Every write is validated as the model says and audited as `template.…`.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from scheduling.choices import FINISHED_STATUSES
from scheduling.models import REQUEST_BODY_FIELDS, GpuRequest, RequestTemplate
from scheduling.services.common import invalid_field
from scheduling.services.requests import GpuRequestSpec, submit_gpu_request
from tenants.errors import ConflictError, ForbiddenError
from tenants.models import Team, scope_of
from tenants.scope import Actor
from tenants.services.organisation import (
    apply_changes,
    audit_value,
    known_fields,
    record_audit_event,
    save_valid,
    signed_in_user,
)

TEMPLATE_FIELDS = frozenset({"name", "description", *REQUEST_BODY_FIELDS})


def _require_writer(actor: Actor, *, team: Team, is_shared: bool, owner_id: int | None) -> None:
    """Shared templates are the lead's to write; personal ones their owner's (members only)."""
    scope = scope_of(actor)
    if scope.is_platform_admin:
        return
    if is_shared:
        if not scope.is_lead_of(team.pk):
            raise ForbiddenError(
                "forbidden", "Only the team's lead or a platform admin may write team templates."
            )
        return
    if not scope.is_member_of(team.pk):
        raise invalid_field("team", "You are not a member of this team.")
    if owner_id is not None and owner_id != actor.pk:
        raise ForbiddenError("forbidden", "Only its owner may change a personal template.")


def _audit(actor: Actor, action: str, template: RequestTemplate, data: dict[str, Any]) -> None:
    record_audit_event(
        actor=actor,
        action=action,
        target=template,
        team=template.team,
        data=data,
        message=template.name,
    )


@transaction.atomic
def create_request_template(
    *, actor: Actor, team: Team, is_shared: bool = False, **fields: Any
) -> RequestTemplate:
    """A new template of `team`: the actor's own, or (a lead) shared with the team."""
    known_fields(fields, TEMPLATE_FIELDS)
    _require_writer(actor, team=team, is_shared=is_shared, owner_id=None)
    template = RequestTemplate(
        team=team, owner=signed_in_user(actor), is_shared=is_shared, **fields
    )
    save_valid(template)
    _audit(actor, "template.created", template, {"fields": audit_value(fields)})
    return template


@transaction.atomic
def update_request_template(
    *, actor: Actor, template: RequestTemplate, **fields: Any
) -> RequestTemplate:
    """Change a template's body (its team and owner stay); `is_shared` only by the lead."""
    known_fields(fields, TEMPLATE_FIELDS | {"is_shared"})
    _require_writer(
        actor, team=template.team, is_shared=template.is_shared, owner_id=template.owner_id
    )
    if fields.get("is_shared", template.is_shared) != template.is_shared:
        _require_writer(actor, team=template.team, is_shared=True, owner_id=template.owner_id)
    changes = apply_changes(template, fields)
    save_valid(template)
    _audit(actor, "template.updated", template, {"changes": changes})
    return template


@transaction.atomic
def delete_request_template(*, actor: Actor, template: RequestTemplate) -> None:
    _require_writer(
        actor, team=template.team, is_shared=template.is_shared, owner_id=template.owner_id
    )
    _audit(actor, "template.deleted", template, template.as_audit_data())
    template.delete()


def request_body_of(request: GpuRequest) -> dict[str, Any]:
    """What a clone of `request` starts from: its project, name, workload and reason."""
    body = {field: getattr(request, field) for field in REQUEST_BODY_FIELDS}
    body.update(project=request.project, name=request.name, reason=request.reason)
    return body


def template_body_of(template: RequestTemplate) -> dict[str, Any]:
    """What a request made from `template` starts from: its body, named after it."""
    body = {field: getattr(template, field) for field in REQUEST_BODY_FIELDS}
    body["name"] = template.name
    return body


def save_request_as_template(
    *, actor: Actor, request: GpuRequest, name: str, is_shared: bool = False
) -> RequestTemplate:
    """A new template of the request's team from the request's body (its project aside)."""
    body = {field: getattr(request, field) for field in REQUEST_BODY_FIELDS}
    return create_request_template(
        actor=actor,
        team=request.team,
        is_shared=is_shared,
        name=name.strip() or request.name or f"Request {request.pk}",
        **body,
    )


def resubmit_gpu_request(*, actor: Actor, request: GpuRequest) -> GpuRequest:
    """Submit a finished request's body again, as `actor`, through the one submit service.

    The new request is validated and approved as any other: today's quota, tier and rules.
    """
    if request.status not in FINISHED_STATUSES:
        raise ConflictError(
            "not_finished",
            f"Request {request.pk} is {request.get_status_display().lower()}: "
            "only a finished request is submitted again.",
        )
    return submit_gpu_request(actor=actor, spec=GpuRequestSpec(**request_body_of(request)))
