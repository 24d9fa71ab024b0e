"""Single sign-on people: their account, and the memberships their provider groups give.

An account is found by the provider's issuer and subject (`OidcIdentity`), never by username:
the first sign-in of a subject creates its account under `preferred_username`, unless another
account already has that name (then the sign-in is refused, see `create_account_for_subject`).

`OIDC_GROUP_MAP` says which provider group grants which role: a team role (developer, team lead
of a team, named by its slug) or an organisation role (finance, platform admin). It is written as
`group=team-slug:role,group=role,...` or as a JSON object of the same strings, e.g.

    gpu-vision-leads=vision:team_lead,gpu-vision-devs=vision:developer,gpu-admins=platform_admin

The map governs the teams and organisation roles it names: on every sign-in the user's memberships
there are made to match the groups (added, role changed, removed). Memberships in teams the map
does not name are the portal's to manage and stay as they are; groups the map does not name are
ignored.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from tenants.choices import ORGANISATION_ROLES, TEAM_ROLES, Role
from tenants.models import AuditEvent, Membership, OidcIdentity, Team
from tenants.scope import Actor
from tenants.services.organisation import record_audit_event

logger = logging.getLogger(__name__)

SOURCE = "identity_provider"
# When one person is in several groups for the same team, the stronger role wins.
TEAM_ROLE_RANK = {Role.DEVELOPER: 1, Role.TEAM_LEAD: 2}


@dataclass(frozen=True, slots=True)
class GroupGrant:
    """What one provider group gives its members: a team role, or an organisation role."""

    role: Role
    team_slug: str | None = None


def parse_group_map(raw: str | Mapping[str, Any]) -> dict[str, GroupGrant]:
    """Read `OIDC_GROUP_MAP` (short syntax, a JSON object, or a mapping already parsed).

    Raises ImproperlyConfigured naming the first entry that does not read.
    """
    if isinstance(raw, str):
        text = raw.strip()
        if not text:
            return {}
        if text.startswith("{"):
            try:
                entries: Mapping[str, Any] = json.loads(text)
            except json.JSONDecodeError as error:
                raise ImproperlyConfigured(f"OIDC_GROUP_MAP is not valid JSON: {error}") from error
        else:
            entries = dict(_split_short_entry(entry) for entry in text.split(",") if entry.strip())
    else:
        entries = raw
    return {str(group): _parse_grant(str(group), value) for group, value in entries.items()}


def _split_short_entry(entry: str) -> tuple[str, str]:
    group, separator, grant = entry.partition("=")
    if not separator or not group.strip():
        raise ImproperlyConfigured(
            f"OIDC_GROUP_MAP entry {entry.strip()!r}: write group=team-slug:role or group=role."
        )
    return group.strip(), grant.strip()


def _parse_grant(group: str, value: Any) -> GroupGrant:
    if isinstance(value, Mapping):
        team_slug, role_name = value.get("team"), value.get("role")
    elif isinstance(value, str):
        team_part, separator, role_part = value.partition(":")
        team_slug, role_name = (team_part, role_part) if separator else (None, team_part)
    else:
        team_slug, role_name = None, None
    team_slug = (str(team_slug).strip() or None) if team_slug is not None else None
    try:
        role = Role(str(role_name).strip())
    except ValueError:
        roles = ", ".join(Role.values)
        raise ImproperlyConfigured(
            f"OIDC_GROUP_MAP: group {group!r} names role {role_name!r}; roles are {roles}."
        ) from None
    if team_slug is None and role not in ORGANISATION_ROLES:
        raise ImproperlyConfigured(
            f"OIDC_GROUP_MAP: group {group!r} gives the team role {role} without a team "
            "(write team-slug:role)."
        )
    if team_slug is not None and role not in TEAM_ROLES:
        raise ImproperlyConfigured(
            f"OIDC_GROUP_MAP: group {group!r} gives the organisation role {role} to a team "
            "(write the role alone)."
        )
    return GroupGrant(role=role, team_slug=team_slug)


def groups_from_claim(value: Any) -> set[str]:
    """The groups claim as a set of names; a missing claim is no groups."""
    if value is None:
        return set()
    if isinstance(value, str):
        return {value}
    if isinstance(value, Iterable):
        return {str(group) for group in value}
    return set()


@dataclass(frozen=True, slots=True)
class ProviderSubject:
    """Who a person is at the identity provider: the ID token's issuer and subject."""

    issuer: str
    subject: str


class IdentityConflict(Exception):
    """A first sign-in whose username already belongs to an account not linked to it."""


def linked_account(subject: ProviderSubject) -> Any | None:
    """The account `subject` is linked to, None before its first sign-in."""
    identity = (
        OidcIdentity.objects.filter(issuer=subject.issuer, subject=subject.subject)
        .select_related("user")
        .first()
    )
    if identity is None:
        return None
    OidcIdentity.objects.filter(pk=identity.pk).update(last_login_at=timezone.now())
    return identity.user


def _claim_fields(claims: Mapping[str, Any]) -> dict[str, str]:
    return {
        "email": str(claims.get("email") or ""),
        "first_name": str(claims.get("given_name") or "")[:150],
        "last_name": str(claims.get("family_name") or "")[:150],
    }


def create_account_for_subject(*, subject: ProviderSubject, claims: Mapping[str, Any]) -> Any:
    """The first sign-in of `subject`: a new account named `preferred_username`, linked to it.

    A username already taken (in any letter case) by another account is refused with
    `IdentityConflict`: the provider names people, it does not decide who owns a portal
    account. A platform operator links an existing account explicitly (`link_identity`). The
    new account has no usable password: it signs in through the provider only.
    """
    username = str(claims["preferred_username"])
    User = get_user_model()
    if User.objects.filter(username__iexact=username).exists():
        raise IdentityConflict(
            f"an account named {username!r} already exists and is not linked to this identity "
            "of the provider; a platform operator can link it (manage.py user_account link-oidc)"
        )
    user = User.objects.create_user(username=username, **_claim_fields(claims))
    OidcIdentity.objects.create(
        user=user, issuer=subject.issuer, subject=subject.subject, last_login_at=timezone.now()
    )
    record_audit_event(
        actor=None,
        action="user.created",
        target=user,
        message="first sign-in through the identity provider",
        data={
            "user": user.get_username(),
            "source": SOURCE,
            "issuer": subject.issuer,
            "subject": subject.subject,
        },
    )
    return user


def update_account_from_claims(*, user: Any, claims: Mapping[str, Any]) -> Any:
    """Bring the account's name and e-mail up to date; the username stays as it was created."""
    fields = _claim_fields(claims)
    changed = [field for field, value in fields.items() if getattr(user, field) != value]
    if changed:
        for field in changed:
            setattr(user, field, fields[field])
        user.save(update_fields=changed)
    return user


@transaction.atomic
def link_identity(*, actor: Actor | None, user: Any, subject: ProviderSubject) -> OidcIdentity:
    """Link `subject` to an existing account, so that its sign-ins reach that account.

    `actor` None is an operator at the command line. A subject linked to another account is
    refused; linking the same pair again changes nothing.
    """
    existing = OidcIdentity.objects.filter(issuer=subject.issuer, subject=subject.subject).first()
    if existing is not None:
        if existing.user_id != user.pk:
            raise IdentityConflict(
                f"subject {subject.subject!r} of {subject.issuer} is linked to another account"
            )
        return existing
    identity = OidcIdentity.objects.create(
        user=user, issuer=subject.issuer, subject=subject.subject
    )
    record_audit_event(
        actor=actor,
        action="user.identity_linked",
        target=user,
        data={"user": user.get_username(), "issuer": subject.issuer, "subject": subject.subject},
    )
    return identity


@transaction.atomic
def unlink_identity(*, actor: Actor | None, user: Any, subject: ProviderSubject) -> bool:
    """Remove the link; the provider's person can no longer sign in as `user`."""
    deleted, _ = OidcIdentity.objects.filter(
        user=user, issuer=subject.issuer, subject=subject.subject
    ).delete()
    if deleted:
        record_audit_event(
            actor=actor,
            action="user.identity_unlinked",
            target=user,
            data={
                "user": user.get_username(),
                "issuer": subject.issuer,
                "subject": subject.subject,
            },
        )
    return bool(deleted)


@transaction.atomic
def sync_memberships_from_groups(
    *, user: Any, groups: Iterable[str], group_map: Mapping[str, GroupGrant]
) -> list[AuditEvent]:
    """Make the user's memberships in the teams and organisation roles the map governs match
    `groups`; return the audit events, one for each membership created, changed or removed.

    Checks no role: the identity provider decided. The events have no actor.
    """
    # 1. One sign-in of a user at a time: the second waits for the first to commit.
    user_model = get_user_model()
    user_model.objects.select_for_update().filter(pk=user.pk).first()

    # 2. What the map governs, and what the user's groups ask for there.
    governed_slugs = {grant.team_slug for grant in group_map.values() if grant.team_slug}
    teams = {team.slug: team for team in Team.objects.filter(slug__in=governed_slugs)}
    for slug in sorted(governed_slugs - teams.keys()):
        logger.warning("OIDC_GROUP_MAP names team %r, which does not exist; skipped", slug)
    governed_roles = {grant.role for grant in group_map.values() if grant.team_slug is None}
    wanted_team_roles: dict[int, Role] = {}
    wanted_roles: set[Role] = set()
    for group in sorted(set(groups) & group_map.keys()):
        grant = group_map[group]
        if grant.team_slug is None:
            wanted_roles.add(grant.role)
            continue
        team = teams.get(grant.team_slug)
        if team is None:
            continue
        held = wanted_team_roles.get(team.pk)
        if held is None or TEAM_ROLE_RANK[grant.role] > TEAM_ROLE_RANK[held]:
            wanted_team_roles[team.pk] = grant.role

    # 3. Compare with the memberships held there: remove, change, then add.
    held_memberships = list(
        Membership.objects.select_related("team").filter(
            Q(team__in=teams.values()) | Q(team__isnull=True, role__in=governed_roles),
            user=user,
        )
    )
    events: list[AuditEvent] = []
    for membership in held_memberships:
        if membership.team_id is None:
            if membership.role in wanted_roles:
                wanted_roles.discard(Role(membership.role))
                continue
            events.append(_record(user, membership, "membership.deleted", role=membership.role))
            membership.delete()
            continue
        role = wanted_team_roles.pop(membership.team_id, None)
        if role is None:
            events.append(_record(user, membership, "membership.deleted", role=membership.role))
            membership.delete()
        elif role != membership.role:
            previous = membership.role
            membership.role = role
            membership.save(update_fields=["role"])
            events.append(
                _record(user, membership, "membership.changed", previous=previous, role=role)
            )
    teams_by_pk = {team.pk: team for team in teams.values()}
    for team_pk, role in wanted_team_roles.items():
        membership = Membership.objects.create(user=user, team=teams_by_pk[team_pk], role=role)
        events.append(_record(user, membership, "membership.created", role=role))
    for role in sorted(wanted_roles):
        membership = Membership.objects.create(user=user, team=None, role=role)
        events.append(_record(user, membership, "membership.created", role=role))
    return events


def _record(
    user: Any, membership: Membership, action: str, *, role: str, previous: str | None = None
) -> AuditEvent:
    """The event the portal's own membership services write, marked as the provider's."""
    data: dict[str, Any] = {"user": user.get_username(), "source": SOURCE}
    if previous is None:
        data |= {"role": str(role)}
    else:
        data |= {"from": previous, "to": str(role), "changes": {"role": [previous, str(role)]}}
    return record_audit_event(
        actor=None,
        action=action,
        target=membership,
        team=membership.team,
        message="from the identity provider's groups",
        data=data,
    )
