"""Writes of quotas: a team's (platform admins) and its split over projects (the team lead)."""

from __future__ import annotations

from django.db import transaction

from scheduling import dispatch
from scheduling.models import Flavor, Quota
from scheduling.services.common import invalid_field
from tenants.errors import ConflictError, ForbiddenError
from tenants.models import Project, Team, scope_of
from tenants.scope import Actor
from tenants.services.organisation import record_audit_event


def _require_quota_setter(actor: Actor, team: Team, project: Project | None) -> None:
    scope = scope_of(actor)
    if project is None and not scope.is_platform_admin:
        raise ForbiddenError("forbidden", "Only platform admins set team quotas.")
    if project is not None and not scope.is_lead_of(team.pk):
        raise ForbiddenError("forbidden", "Only the team lead splits the team quota.")


def _check_project_split(*, team: Team, project: Project, flavor: Flavor, quota: Quota) -> None:
    """A project's quota fits inside the team's, and all projects together inside its guarantee."""
    team_quota = Quota.objects.filter(team=team, project__isnull=True, flavor=flavor).first()
    if team_quota is None:
        raise invalid_field(
            "flavor", f"Team {team} has no quota for {flavor} to split.", "no_quota"
        )
    if quota.limit > team_quota.limit:
        raise invalid_field("limit", f"The team's limit for {flavor} is {team_quota.limit}.")
    others = (
        Quota.objects.filter(team=team, flavor=flavor, project__isnull=False)
        .exclude(project=project)
        .values_list("guaranteed", flat=True)
    )
    if sum(others) + quota.guaranteed > team_quota.guaranteed:
        raise invalid_field(
            "guaranteed",
            f"Projects together would be guaranteed more than the team's "
            f"{team_quota.guaranteed} {flavor}.",
        )


def _check_team_covers_projects(*, team: Team, flavor: Flavor, quota: Quota) -> None:
    projects = Quota.objects.filter(team=team, flavor=flavor, project__isnull=False)
    if sum(projects.values_list("guaranteed", flat=True)) > quota.guaranteed:
        raise invalid_field(
            "guaranteed", "The team's projects are already guaranteed more than that."
        )
    if any(limit > quota.limit for limit in projects.values_list("limit", flat=True)):
        raise invalid_field("limit", "A project of the team has a higher limit than that.")


@transaction.atomic
def set_quota(
    *,
    actor: Actor,
    team: Team,
    flavor: Flavor,
    guaranteed: int,
    limit: int,
    project: Project | None = None,
    quota: Quota | None = None,
) -> Quota:
    """Create or change a team's quota (admins) or a project's part of it (the team's lead)."""
    _require_quota_setter(actor, team, project)
    if project is not None and project.team_id != team.pk:
        raise invalid_field("project", "The project belongs to another team.")
    if guaranteed > limit:
        raise invalid_field("guaranteed", "The guaranteed amount cannot exceed the limit.")
    # Lock the team's row first so concurrent splits of one team are decided one at a time.
    list(Quota.objects.select_for_update().filter(team=team, flavor=flavor).order_by("pk"))
    if quota is None:
        quota = Quota.objects.filter(team=team, project=project, flavor=flavor).first() or Quota(
            team=team, project=project, flavor=flavor
        )
    before = (quota.guaranteed, quota.limit) if quota.pk else None
    after = (guaranteed, limit)
    quota.guaranteed, quota.limit = guaranteed, limit
    if project is None:
        _check_team_covers_projects(team=team, flavor=flavor, quota=quota)
    else:
        _check_project_split(team=team, project=project, flavor=flavor, quota=quota)
    quota.save()
    record_audit_event(
        actor=actor,
        action="quota.set",
        target=quota,
        team=team,
        project=project,
        data={
            "flavor": flavor.pk,
            "before": before,
            "after": [guaranteed, limit],
            "changes": {
                name: [old, new]
                for name, old, new in zip(
                    ("guaranteed", "limit"), before or (None, None), after, strict=True
                )
                if old != new
            },
        },
    )
    dispatch.request_quota_push(team_id=team.pk, project_id=project.pk if project else None)
    return quota


@transaction.atomic
def delete_quota(*, actor: Actor, quota: Quota) -> None:
    _require_quota_setter(actor, quota.team, quota.project)
    if (
        quota.project is None
        and Quota.objects.filter(
            team=quota.team, flavor=quota.flavor, project__isnull=False
        ).exists()
    ):
        raise ConflictError("quota_split", "Remove the projects' parts of this quota first.")
    record_audit_event(
        actor=actor, action="quota.deleted", target=quota, team=quota.team, project=quota.project
    )
    dispatch.request_quota_push(team_id=quota.team_id, project_id=quota.project_id)
    quota.delete()
