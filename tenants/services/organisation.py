"""Teams, projects and memberships: each service checks the role and leaves an audit event."""

from __future__ import annotations

from functools import partial
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.db import IntegrityError, models, transaction
from django.dispatch import Signal

from tenants.choices import ORGANISATION_ROLES, TEAM_ROLES, Role
from tenants.demo import DemoSeeding
from tenants.errors import ConflictError, DomainError, ForbiddenError, fields_message
from tenants.models import AuditEvent, Membership, Project, Team, scope_of, user_of
from tenants.scope import Actor


def record_audit_event(
    *,
    actor: Actor | None,
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
        actor=_saved_user(actor),
        action=action,
        # `__class__`, not `type()`: a page's `request.user` is a lazy proxy of the User.
        target_type=target.__class__.__name__,
        target_id=str(getattr(target, "pk", "") or ""),
        team=team,
        project=project,
        message=message,
        data=data or {},
    )
    if commit:
        event.save()
    return event


def _saved_user(actor: Actor | None) -> User | None:
    user = user_of(actor)
    return user if user is not None and user.pk else None


def require_platform_admin(actor: Actor, what: str) -> None:
    """Refuse (403) unless `actor` is a platform admin; `what` ends "Only platform admins may"."""
    if not scope_of(actor).is_platform_admin:
        raise ForbiddenError("forbidden", f"Only platform admins may {what}.")


def signed_in_user(actor: Actor) -> User:
    """The user behind `actor`, refused (403) for a visitor: what they create is theirs."""
    user = user_of(actor)
    if user is None:
        raise ForbiddenError("forbidden", "Sign in first.")
    return user


def _require_lead(actor: Actor, team: Team, what: str) -> None:
    if not scope_of(actor).is_lead_of(team.pk):
        raise ForbiddenError("forbidden", f"Only the team's lead or a platform admin may {what}.")


def audit_value(value: Any) -> Any:
    """A field's value as the audit trail keeps it: objects by primary key, the rest as JSON."""
    if isinstance(value, models.Model):
        return value.pk
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple | set | frozenset):
        return [audit_value(item) for item in value]
    if isinstance(value, dict):
        return {str(key): audit_value(item) for key, item in value.items()}
    return str(value)


def apply_changes(instance: models.Model, changes: dict[str, Any]) -> dict[str, list[Any]]:
    """Set `changes` on `instance`; answer {field: [before, after]} for the fields that differ."""
    changed: dict[str, list[Any]] = {}
    for field, value in changes.items():
        before = getattr(instance, field)
        if before != value:
            changed[field] = [audit_value(before), audit_value(value)]
        setattr(instance, field, value)
    return changed


def validation_error(error: ValidationError) -> DomainError:
    """A model's validation error as the domain's: one message, and the fields it names."""
    messages = (
        error.message_dict if hasattr(error, "error_dict") else {NON_FIELD_ERRORS: error.messages}
    )
    fields = {
        name: " ".join(str(text) for text in texts)
        for name, texts in messages.items()
        if name != NON_FIELD_ERRORS
    }
    general = " ".join(str(text) for text in messages.get(NON_FIELD_ERRORS, []))
    return DomainError("invalid", general or fields_message(fields), fields=fields)


def save_valid(instance: models.Model) -> None:
    """Validate `instance` as its model says (fields, uniqueness, constraints), then save it.

    Refusals are `DomainError` (400) naming the fields; a clash the checks could not see (two
    writes at once) is a `ConflictError` (409).
    """
    try:
        instance.full_clean()
    except ValidationError as error:
        raise validation_error(error) from error
    try:
        with transaction.atomic():
            instance.save()
    except IntegrityError as error:
        raise ConflictError("conflict", f"{instance} clashes with another object.") from error


def delete_unused(instance: models.Model, *, code: str, message: str) -> None:
    """Delete `instance`, or refuse with a `ConflictError` (409) while other objects need it."""
    try:
        with transaction.atomic():
            instance.delete()
    except IntegrityError as error:  # ProtectedError and RestrictedError are IntegrityErrors
        raise ConflictError(code, message) from error


TEAM_FIELDS = frozenset({"name", "slug", "description"})
PROJECT_FIELDS = frozenset({"name", "slug", "description"})


def known_fields(fields: dict[str, Any], allowed: frozenset[str]) -> dict[str, Any]:
    """`fields`, or a `DomainError` naming those a service does not write."""
    unknown = sorted(set(fields) - allowed)
    if unknown:
        raise DomainError(
            "invalid",
            f"Unknown fields: {', '.join(unknown)}.",
            fields=dict.fromkeys(unknown, "unknown field"),
        )
    return fields


@transaction.atomic
def create_team(*, actor: Actor, **fields: Any) -> Team:
    """A new team (platform admins): name, slug and description."""
    require_platform_admin(actor, "create teams")
    team = Team(**known_fields(fields, TEAM_FIELDS))
    save_valid(team)
    record_audit_event(
        actor=actor,
        action="team.created",
        target=team,
        team=team,
        data={"fields": audit_value(fields)},
    )
    return team


@transaction.atomic
def update_team(*, actor: Actor, team: Team, **fields: Any) -> Team:
    require_platform_admin(actor, "change teams")
    changes = apply_changes(team, known_fields(fields, TEAM_FIELDS))
    save_valid(team)
    record_audit_event(
        actor=actor, action="team.updated", target=team, team=team, data={"changes": changes}
    )
    return team


@transaction.atomic
def delete_team(*, actor: Actor, team: Team) -> None:
    """Delete an empty team; one with projects (and so with requests) is refused (409)."""
    require_platform_admin(actor, "delete teams")
    if team.projects.exists():
        raise ConflictError("team_has_projects", "Delete or move the team's projects first.")
    record_audit_event(actor=actor, action="team.deleted", target=team, message=team.name)
    delete_unused(team, code="team_in_use", message="The team still has usage or statements.")


# Sent with `project` when a project was created or changed (inside the transaction): the
# runtime makes its namespace ready on the clusters after the commit, before any launch.
project_saved = Signal()


@transaction.atomic
def create_project(*, actor: Actor, team: Team, **fields: Any) -> Project:
    """A new project of `team` (its lead or a platform admin): name, slug and description."""
    _require_lead(actor, team, "create projects")
    project = Project(team=team, **known_fields(fields, PROJECT_FIELDS))
    save_valid(project)
    record_audit_event(
        actor=actor,
        action="project.created",
        target=project,
        team=team,
        project=project,
        data={"fields": audit_value(fields)},
    )
    project_saved.send(sender=Project, project=project)
    return project


@transaction.atomic
def update_project(*, actor: Actor, project: Project, **fields: Any) -> Project:
    _require_lead(actor, project.team, "change projects")
    if "team" in fields and fields["team"] != project.team:
        raise DomainError(
            "project_team_fixed", "A project cannot move to another team.", fields={"team": ""}
        )
    fields.pop("team", None)
    changes = apply_changes(project, known_fields(fields, PROJECT_FIELDS))
    save_valid(project)
    record_audit_event(
        actor=actor,
        action="project.updated",
        target=project,
        team=project.team,
        project=project,
        data={"changes": changes},
    )
    project_saved.send(sender=Project, project=project)
    return project


@transaction.atomic
def delete_project(*, actor: Actor, project: Project) -> None:
    """Delete a project without requests or usage (its quotas go with it); else a 409."""
    _require_lead(actor, project.team, "delete projects")
    record_audit_event(
        actor=actor,
        action="project.deleted",
        target=project,
        team=project.team,
        message=str(project),
    )
    delete_unused(
        project, code="project_in_use", message="The project still has requests or usage."
    )


def _check_role_fits_team(role: str, team: Team | None) -> None:
    if role not in Role.values:
        raise DomainError(
            "invalid",
            f"Unknown role {role!r}.",
            fields={"role": f"one of {', '.join(Role.values)}"},
        )
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


def _check_weight_fits_team(weight: int, team: Team | None) -> None:
    if team is None and weight != 1:
        raise DomainError(
            "invalid",
            "The fair-share weight applies to team memberships only; "
            "an organisation role keeps weight 1.",
            fields={
                "fair_share_weight": "applies to team memberships only; organisation roles keep 1"
            },
        )


@transaction.atomic
def add_membership(
    *, actor: Actor, team: Team | None, user: Any, role: str, fair_share_weight: int = 1
) -> Membership:
    """Give `user` a role (and, in a team, a fair-share weight); team leads manage their own
    team, platform admins everything."""
    _check_role_fits_team(role, team)
    _check_weight_fits_team(fair_share_weight, team)
    if team is None:
        require_platform_admin(actor, "grant organisation roles")
    else:
        _require_lead(actor, team, "add members")
    existing = Membership.objects.filter(user=user, team=team)
    if team is None:
        existing = existing.filter(role=role)
    if existing.exists():
        raise ConflictError("already_member", f"{user} already has a role here.")
    membership = Membership(user=user, team=team, role=role, fair_share_weight=fair_share_weight)
    save_valid(membership)
    data: dict[str, Any] = {"user": user.get_username(), "role": role}
    if fair_share_weight != 1:
        data["fair_share_weight"] = fair_share_weight
    record_audit_event(
        actor=actor, action="membership.created", target=membership, team=team, data=data
    )
    return membership


MEMBERSHIP_FIELDS = frozenset({"role", "fair_share_weight"})


@transaction.atomic
def change_membership(*, actor: Actor, membership: Membership, **fields: Any) -> Membership:
    """Change a membership's role or fair-share weight (user and team are fixed): a team's by
    its lead or a platform admin, an organisation role's by a platform admin. The audit event
    `membership.changed` holds each changed field as [before, after]."""
    fields = known_fields(fields, MEMBERSHIP_FIELDS)
    if membership.team is None:
        require_platform_admin(actor, "change organisation roles")
    else:
        _require_lead(actor, membership.team, "change members' roles and weights")
    _check_role_fits_team(fields.get("role", membership.role), membership.team)
    _check_weight_fits_team(
        fields.get("fair_share_weight", membership.fair_share_weight), membership.team
    )
    changes = apply_changes(membership, fields)
    save_valid(membership)
    record_audit_event(
        actor=actor,
        action="membership.changed",
        target=membership,
        team=membership.team,
        data={"user": membership.user.get_username(), "changes": changes},
    )
    return membership


@transaction.atomic
def remove_membership(*, actor: Actor, membership: Membership) -> None:
    if membership.team is None:
        require_platform_admin(actor, "revoke organisation roles")
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


# team slug: (name, {project slug: name})
DEMO_TEAMS = {
    "vision": ("Vision", {"detection": "Detection", "segmentation": "Segmentation"}),
    "speech": ("Speech", {"asr": "ASR", "tts": "TTS"}),
}
DEMO_USERS = [
    ("alice", "Alice", "Developer", Role.DEVELOPER, "vision"),
    ("bob", "Bob", "Lead", Role.TEAM_LEAD, "vision"),
    ("carol", "Carol", "Developer", Role.DEVELOPER, "speech"),
    ("dan", "Dan", "Lead", Role.TEAM_LEAD, "speech"),
    ("fiona", "Fiona", "Finance", Role.FINANCE, None),
    ("root", "Root", "Admin", Role.PLATFORM_ADMIN, None),
]
DEMO_STAFF = frozenset({"root"})  # may open the (read-only) Django admin


@transaction.atomic
def seed_demo_organisation(*, password: str, seeding: DemoSeeding | None = None) -> dict[str, Team]:
    """Make the demo teams, projects, users and roles that were never seeded; answer the demo
    teams that are there. Each is made once (`tenants.demo`): what a user changed or deleted
    stays so, a demo user's password included."""
    record = seeding or DemoSeeding()
    user_model = get_user_model()
    teams: dict[str, Team] = {}
    for slug, (name, projects) in DEMO_TEAMS.items():
        team = record.get_or_create(f"team:{slug}", Team, slug=slug, defaults={"name": name})
        if team is None:
            for project_slug in projects:
                record.could_not(f"project:{slug}/{project_slug}", f"team {slug} is gone")
            continue
        teams[slug] = team
        for project_slug, project_name in projects.items():
            record.get_or_create(
                f"project:{slug}/{project_slug}",
                Project,
                team=team,
                slug=project_slug,
                defaults={"name": project_name},
            )
    for username, first, last, role, team_slug in DEMO_USERS:
        user = record.once(
            f"user:{username}",
            user_model,
            partial(_demo_user, username, first, last, password=password),
        )
        where = team_slug or "organisation"
        # One role per user and team: a role given since is the user's to keep.
        key = f"membership:{username}@{where}" + ("" if team_slug else f":{role}")
        if user is None or (team_slug is not None and team_slug not in teams):
            record.could_not(key, f"user {username} or team {where} is gone")
            continue
        if team_slug is None:
            record.get_or_create(key, Membership, user=user, team=None, role=role, defaults={})
        else:
            record.get_or_create(
                key, Membership, user=user, team=teams[team_slug], defaults={"role": role}
            )
    if seeding is None:
        record.finish()
    return teams


def _demo_user(username: str, first: str, last: str, *, password: str) -> Any:
    """A demo user with the demo password; one who is there already keeps theirs."""
    user, created = get_user_model().objects.get_or_create(
        username=username,
        defaults={"first_name": first, "last_name": last, "email": f"{username}@example.com"},
    )
    if created:
        user.set_password(password)
        user.is_staff = user.is_superuser = username in DEMO_STAFF
        user.save()
    return user
