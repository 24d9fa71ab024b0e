"""Writes to the organisation. Each service checks the actor's role and leaves an audit event."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction

from tenants.choices import ORGANISATION_ROLES, TEAM_ROLES, Role
from tenants.errors import ConflictError, DomainError, ForbiddenError
from tenants.models import AuditEvent, Membership, Project, Team, scope_of


def record_audit_event(
    *,
    actor: Any,
    action: str,
    target: Any,
    message: str = "",
    team: Team | None = None,
    project: Project | None = None,
    data: dict[str, Any] | None = None,
    commit: bool = True,
) -> AuditEvent:
    """Append one audit event; `actor` is None for decisions the system took by itself.

    With `commit=False` the event is returned unsaved, for the caller to insert in bulk.
    """
    event = AuditEvent(
        actor=actor if actor is not None and getattr(actor, "pk", None) else None,
        action=action,
        target_type=type(target).__name__,
        target_id=str(getattr(target, "pk", "") or ""),
        team=team,
        project=project,
        message=message,
        data=data or {},
    )
    if commit:
        event.save()
    return event


def _require_platform_admin(actor: Any, what: str) -> None:
    if not scope_of(actor).is_platform_admin:
        raise ForbiddenError("forbidden", f"Only platform admins may {what}.")


def _require_lead(actor: Any, team: Team, what: str) -> None:
    if not scope_of(actor).is_lead_of(team.pk):
        raise ForbiddenError("forbidden", f"Only the team's lead or a platform admin may {what}.")


@transaction.atomic
def create_team(*, actor: Any, name: str, slug: str, description: str = "") -> Team:
    _require_platform_admin(actor, "create teams")
    team = Team.objects.create(name=name, slug=slug, description=description)
    record_audit_event(actor=actor, action="team.created", target=team, team=team)
    return team


@transaction.atomic
def update_team(*, actor: Any, team: Team, **changes: Any) -> Team:
    _require_platform_admin(actor, "change teams")
    for field, value in changes.items():
        setattr(team, field, value)
    team.save(update_fields=list(changes))
    record_audit_event(
        actor=actor, action="team.updated", target=team, team=team, data={"fields": list(changes)}
    )
    return team


@transaction.atomic
def delete_team(*, actor: Any, team: Team) -> None:
    _require_platform_admin(actor, "delete teams")
    if team.projects.exists():
        raise ConflictError("team_has_projects", "Delete or move the team's projects first.")
    record_audit_event(actor=actor, action="team.deleted", target=team, message=team.name)
    team.delete()


@transaction.atomic
def create_project(
    *, actor: Any, team: Team, name: str, slug: str, description: str = ""
) -> Project:
    _require_lead(actor, team, "create projects")
    project = Project.objects.create(team=team, name=name, slug=slug, description=description)
    record_audit_event(
        actor=actor, action="project.created", target=project, team=team, project=project
    )
    return project


@transaction.atomic
def update_project(*, actor: Any, project: Project, **changes: Any) -> Project:
    _require_lead(actor, project.team, "change projects")
    if "team" in changes and changes["team"] != project.team:
        raise DomainError(
            "project_team_fixed", "A project cannot move to another team.", fields={"team": ""}
        )
    changes.pop("team", None)
    for field, value in changes.items():
        setattr(project, field, value)
    project.save(update_fields=list(changes) or None)
    record_audit_event(
        actor=actor,
        action="project.updated",
        target=project,
        team=project.team,
        project=project,
        data={"fields": list(changes)},
    )
    return project


@transaction.atomic
def delete_project(*, actor: Any, project: Project) -> None:
    _require_lead(actor, project.team, "delete projects")
    record_audit_event(
        actor=actor,
        action="project.deleted",
        target=project,
        team=project.team,
        message=str(project),
    )
    try:
        with transaction.atomic():
            project.delete()
    except IntegrityError as error:
        raise ConflictError("project_in_use", "The project still has work or quotas.") from error


def _check_role_fits_team(role: str, team: Team | None) -> None:
    if team is None and role not in ORGANISATION_ROLES:
        raise DomainError(
            "invalid", "Developer and team lead roles need a team.", fields={"team": "required"}
        )
    if team is not None and role not in TEAM_ROLES:
        raise DomainError(
            "invalid",
            "Finance and platform admin are organisation roles; leave the team empty.",
            fields={"role": "organisation role"},
        )


@transaction.atomic
def add_member(*, actor: Any, user: Any, team: Team | None, role: str) -> Membership:
    """Give `user` a role; team leads manage their own team, platform admins everything."""
    _check_role_fits_team(role, team)
    if team is None:
        _require_platform_admin(actor, "grant organisation roles")
    else:
        _require_lead(actor, team, "add members")
    existing = Membership.objects.filter(user=user, team=team)
    if team is None:
        existing = existing.filter(role=role)
    if existing.exists():
        raise ConflictError("already_member", f"{user} already has a role here.")
    membership = Membership.objects.create(user=user, team=team, role=role)
    record_audit_event(
        actor=actor,
        action="membership.created",
        target=membership,
        team=team,
        data={"user": user.get_username(), "role": role},
    )
    return membership


@transaction.atomic
def change_member_role(*, actor: Any, membership: Membership, role: str) -> Membership:
    _check_role_fits_team(role, membership.team)
    if membership.team is None:
        _require_platform_admin(actor, "change organisation roles")
    else:
        _require_lead(actor, membership.team, "change roles")
    previous = membership.role
    membership.role = role
    membership.save(update_fields=["role"])
    record_audit_event(
        actor=actor,
        action="membership.role_changed",
        target=membership,
        team=membership.team,
        data={"from": previous, "to": role},
    )
    return membership


@transaction.atomic
def remove_member(*, actor: Any, membership: Membership) -> None:
    if membership.team is None:
        _require_platform_admin(actor, "revoke organisation roles")
    else:
        _require_lead(actor, membership.team, "remove members")
    record_audit_event(
        actor=actor,
        action="membership.deleted",
        target=membership,
        team=membership.team,
        data={"user": membership.user.get_username(), "role": membership.role},
    )
    membership.delete()


DEMO_TEAMS = {
    "vision": ("Vision", ["detection", "segmentation"]),
    "speech": ("Speech", ["asr", "tts"]),
}
DEMO_USERS = [
    ("alice", "Alice", "Developer", Role.DEVELOPER, "vision"),
    ("bob", "Bob", "Lead", Role.TEAM_LEAD, "vision"),
    ("carol", "Carol", "Developer", Role.DEVELOPER, "speech"),
    ("dan", "Dan", "Lead", Role.TEAM_LEAD, "speech"),
    ("fiona", "Fiona", "Finance", Role.FINANCE, None),
    ("root", "Root", "Admin", Role.PLATFORM_ADMIN, None),
]


@transaction.atomic
def seed_demo_organisation(*, password: str) -> dict[str, Team]:
    """Create (or bring back) the demo teams, projects and users; safe to run again."""
    user_model = get_user_model()
    teams: dict[str, Team] = {}
    for slug, (name, project_slugs) in DEMO_TEAMS.items():
        team, _ = Team.objects.get_or_create(slug=slug, defaults={"name": name})
        teams[slug] = team
        for project_slug in project_slugs:
            Project.objects.get_or_create(
                team=team, slug=project_slug, defaults={"name": project_slug.upper()}
            )
    for username, first, last, role, team_slug in DEMO_USERS:
        user, created = user_model.objects.get_or_create(
            username=username,
            defaults={"first_name": first, "last_name": last, "email": f"{username}@example.com"},
        )
        if created or not user.check_password(password):
            user.set_password(password)
            user.save()
        member_team = teams[team_slug] if team_slug else None
        Membership.objects.get_or_create(user=user, team=member_team, role=role)
    return teams
