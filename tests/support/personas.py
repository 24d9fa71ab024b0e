"""Personas: the people every test talks about — owner, member and outsider of each team."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import User
from knox.models import AuthToken
from rest_framework.test import APIClient

from tenants.choices import Role
from tenants.models import Project, Team
from tests.support.factories import UserFactory


@dataclass
class Org:
    """Two teams with a lead (owner) and a developer (member) each, finance, an admin, a nobody."""

    team_a: Team
    team_b: Team
    project_a: Project
    project_a2: Project
    project_b: Project
    lead_a: User
    dev_a: User
    lead_b: User
    dev_b: User
    finance: User
    admin: User
    nobody: User


def make_user(username: str, role: str | None = None, team: Team | None = None) -> User:
    """A user whose password is `pw-<username>`, with `role` (in `team`) if given."""
    user: User = UserFactory.create(username=username, role=role, role__team=team)
    return user


def make_org() -> Org:
    team_a = Team.objects.create(name="Team A", slug="team-a")
    team_b = Team.objects.create(name="Team B", slug="team-b")
    return Org(
        team_a=team_a,
        team_b=team_b,
        project_a=Project.objects.create(team=team_a, name="A one", slug="a-one"),
        project_a2=Project.objects.create(team=team_a, name="A two", slug="a-two"),
        project_b=Project.objects.create(team=team_b, name="B one", slug="b-one"),
        lead_a=make_user("lead_a", Role.TEAM_LEAD, team_a),
        dev_a=make_user("dev_a", Role.DEVELOPER, team_a),
        lead_b=make_user("lead_b", Role.TEAM_LEAD, team_b),
        dev_b=make_user("dev_b", Role.DEVELOPER, team_b),
        finance=make_user("finance", Role.FINANCE),
        admin=make_user("admin", Role.PLATFORM_ADMIN),
        nobody=make_user("nobody"),
    )


def api_client(user: User | None) -> APIClient:
    """An API client that authenticates the way users do: a real personal token."""
    client = APIClient()
    if user is not None:
        _, token = AuthToken.objects.create(user=user)
        client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client
