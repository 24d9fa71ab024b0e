"""Writes of a project's data: its storage quota, workspace, home volumes and secrets.

The lead of the project's team (or a platform admin) writes workspaces and secrets; platform
admins set a team's storage quota. Every write is audited without values, and the cluster's
copy follows after commit (`dispatch.request_project_data_sync`).
"""

from __future__ import annotations

import json
import re
from typing import Any

from django.db import transaction
from django.db.models import Sum

from scheduling import dispatch
from scheduling.models import (
    HomeVolume,
    ProjectSecret,
    ProjectWorkspace,
    SecretKind,
    StorageQuota,
    VolumeAccessMode,
)
from scheduling.sealing import seal
from scheduling.services.common import invalid_field
from tenants.errors import DomainError, ForbiddenError
from tenants.models import Project, Team, scope_of
from tenants.scope import Actor
from tenants.services.organisation import record_audit_event, require_platform_admin, save_valid

SECRET_KEY_NAME = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")
SECRET_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$")
STORAGE_CLASS_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
MAX_SECRET_BYTES = 512 * 1024  # Kubernetes refuses Secrets over 1 MiB; keep well below.
REGISTRY_KEY = ".dockerconfigjson"
REGISTRY_HOST = re.compile(r"^(https?://)?[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._/-]*)?$")


def _require_lead(actor: Actor, team: Team, what: str) -> None:
    if not scope_of(actor).is_lead_of(team.pk):
        raise ForbiddenError("forbidden", f"Only the team's lead or a platform admin may {what}.")


def _audit(actor: Actor, action: str, target: Any, project: Project, data: dict[str, Any]) -> None:
    record_audit_event(
        actor=actor, action=action, target=target, team=project.team, project=project, data=data
    )


# Storage quota ------------------------------------------------------------------------------


def storage_used_gib(*, team: Team, excluding: ProjectWorkspace | None = None) -> int:
    """GiB the team's workspaces and home volumes claim (`excluding` one workspace's own)."""
    workspaces = ProjectWorkspace.objects.filter(project__team=team)
    homes = HomeVolume.objects.filter(workspace__project__team=team)
    if excluding is not None:
        workspaces = workspaces.exclude(pk=excluding.pk)
    total = (workspaces.aggregate(s=Sum("size_gib"))["s"] or 0) + (
        homes.aggregate(s=Sum("size_gib"))["s"] or 0
    )
    return int(total)


def _check_storage(*, team: Team, field: str, wanted_gib: int, used_gib: int) -> None:
    """Refuse (400, `storage_quota_exceeded`) when `wanted_gib` more would pass the quota."""
    quota = StorageQuota.objects.select_for_update().filter(team=team).first()
    limit = quota.limit_gib if quota is not None else 0
    if used_gib + wanted_gib > limit:
        raise invalid_field(
            field,
            f"Team {team} may claim {limit} GiB of storage and claims {used_gib} GiB; "
            f"{wanted_gib} GiB more would pass its storage quota.",
            "storage_quota_exceeded",
        )


@transaction.atomic
def set_storage_quota(*, actor: Actor, team: Team, limit_gib: int) -> StorageQuota:
    """Set how many GiB a team's projects may claim (platform admins)."""
    require_platform_admin(actor, "set storage quotas")
    quota, _ = StorageQuota.objects.get_or_create(team=team)
    before = quota.limit_gib
    quota.limit_gib = limit_gib
    save_valid(quota)
    record_audit_event(
        actor=actor,
        action="storage_quota.set",
        target=quota,
        team=team,
        data={"limit_gib": [before, limit_gib], "changes": {"limit_gib": [before, limit_gib]}},
    )
    return quota


@transaction.atomic
def delete_storage_quota(*, actor: Actor, quota: StorageQuota) -> None:
    require_platform_admin(actor, "remove storage quotas")
    record_audit_event(
        actor=actor,
        action="storage_quota.deleted",
        target=quota,
        team=quota.team,
        data=quota.as_audit_data(),
    )
    quota.delete()


# Workspaces ---------------------------------------------------------------------------------


def _validate_storage_class(storage_class: str) -> None:
    if storage_class and not STORAGE_CLASS_NAME.match(storage_class):
        raise invalid_field("storage_class", f"'{storage_class}' is not a storage class name.")


@transaction.atomic
def create_workspace(
    *,
    actor: Actor,
    project: Project,
    size_gib: int,
    storage_class: str = "",
    access_mode: str = VolumeAccessMode.READ_WRITE_MANY,
    home_size_gib: int = 0,
) -> ProjectWorkspace:
    """The project's workspace volume, its size counted against the team's storage quota."""
    _require_lead(actor, project.team, "set up workspaces")
    _validate_storage_class(storage_class)
    if ProjectWorkspace.objects.filter(project=project).exists():
        raise invalid_field("project", f"Project {project} already has a workspace: change it.")
    _check_storage(
        team=project.team,
        field="size_gib",
        wanted_gib=size_gib,
        used_gib=storage_used_gib(team=project.team),
    )
    workspace = ProjectWorkspace(
        project=project,
        size_gib=size_gib,
        storage_class=storage_class,
        access_mode=access_mode,
        home_size_gib=home_size_gib,
    )
    save_valid(workspace)
    _audit(actor, "workspace.created", workspace, project, workspace.as_audit_data())
    dispatch.request_project_data_sync(project.pk)
    return workspace


@transaction.atomic
def update_workspace(
    *,
    actor: Actor,
    workspace: ProjectWorkspace,
    size_gib: int | None = None,
    home_size_gib: int | None = None,
    storage_class: str | None = None,
    access_mode: str | None = None,
    project: Project | None = None,
) -> ProjectWorkspace:
    """Grow the workspace or change the size of new home volumes. A claim's storage class
    and access mode are fixed once made, and a volume cannot shrink."""
    team = workspace.project.team
    _require_lead(actor, team, "change workspaces")
    if project is not None and project != workspace.project:
        raise invalid_field("project", "A workspace cannot move to another project.")
    if storage_class is not None and storage_class != workspace.storage_class:
        raise invalid_field("storage_class", "The storage class of a volume is fixed once made.")
    if access_mode is not None and access_mode != workspace.access_mode:
        raise invalid_field("access_mode", "The access mode of a volume is fixed once made.")
    before = workspace.as_audit_data()
    if size_gib is not None and size_gib != workspace.size_gib:
        if size_gib < workspace.size_gib:
            raise invalid_field(
                "size_gib",
                f"A volume cannot shrink: the workspace holds {workspace.size_gib} GiB.",
            )
        _check_storage(
            team=team,
            field="size_gib",
            wanted_gib=size_gib,
            used_gib=storage_used_gib(team=team, excluding=workspace),
        )
        workspace.size_gib = size_gib
    if home_size_gib is not None:
        workspace.home_size_gib = home_size_gib
    save_valid(workspace)
    _audit(
        actor,
        "workspace.updated",
        workspace,
        workspace.project,
        {"before": before, "after": workspace.as_audit_data()},
    )
    dispatch.request_project_data_sync(workspace.project_id)
    return workspace


@transaction.atomic
def delete_workspace(*, actor: Actor, workspace: ProjectWorkspace) -> None:
    """Drop the workspace and its home volumes; the cluster deletes the claims (and so the
    data, as the storage class's reclaim policy says) once no pod uses them."""
    project = workspace.project
    _require_lead(actor, project.team, "delete workspaces")
    claims = ["workspace", *(home_claim_name(h.user) for h in workspace.home_volumes.all())]
    _audit(actor, "workspace.deleted", workspace, project, workspace.as_audit_data())
    workspace.delete()
    dispatch.request_project_data_removal(project.namespace, "PersistentVolumeClaim", claims)


def home_claim_name(user: Any) -> str:
    """The claim name of a user's home volume: `home-<user id>` (usernames need not be DNS)."""
    return f"home-{user.pk}"


def ensure_home_volume(*, project: Project, user: Any) -> HomeVolume:
    """The user's home volume in the project, made (and counted) the first time; 400 when the
    project has no workspace with home volumes or the storage quota has no room."""
    workspace = ProjectWorkspace.objects.filter(project=project).first()
    if workspace is None or workspace.home_size_gib == 0:
        raise invalid_field(
            "home_volume", f"Project {project} has no home volumes: ask its lead to set them up."
        )
    existing = HomeVolume.objects.filter(workspace=workspace, user=user).first()
    if existing is not None:
        return existing
    _check_storage(
        team=project.team,
        field="home_volume",
        wanted_gib=workspace.home_size_gib,
        used_gib=storage_used_gib(team=project.team),
    )
    return HomeVolume.objects.create(
        workspace=workspace, user=user, size_gib=workspace.home_size_gib
    )


# Secrets ------------------------------------------------------------------------------------


def _validated_values(
    kind: str, data: dict[str, str] | None, registry: str, username: str, password: str
) -> dict[str, str]:
    if kind == SecretKind.REGISTRY:
        if data:
            raise invalid_field("data", "A registry login has no data: give its password.")
        if not registry or not username or not password:
            field = "registry" if not registry else "username" if not username else "password"
            raise invalid_field(field, "A registry login needs registry, username and password.")
        if not REGISTRY_HOST.match(registry):
            raise invalid_field("registry", f"'{registry}' is not a registry host.")
        return {"password": password}
    if registry or username or password:
        raise invalid_field("password", "Registry, username and password are for registry logins.")
    if not data:
        raise invalid_field("data", "A secret holds at least one key.")
    for key in data:
        if not SECRET_KEY_NAME.match(key):
            raise invalid_field("data", f"'{key}' is not a valid key (letters, digits, -._).")
    if len(json.dumps(data)) > MAX_SECRET_BYTES:
        raise invalid_field("data", f"A secret holds at most {MAX_SECRET_BYTES // 1024} KiB.")
    return dict(data)


@transaction.atomic
def create_project_secret(
    *,
    actor: Actor,
    project: Project,
    name: str,
    kind: str = SecretKind.GENERIC,
    data: dict[str, str] | None = None,
    registry: str = "",
    username: str = "",
    password: str = "",
) -> ProjectSecret:
    """Store a secret for the project's workloads; its values are never shown again."""
    _require_lead(actor, project.team, "store project secrets")
    if not SECRET_NAME.match(name):
        raise invalid_field("name", f"'{name}' must be 1-40 lowercase letters, digits or '-'.")
    values = _validated_values(kind, data, registry, username, password)
    secret = ProjectSecret(
        project=project,
        name=name,
        kind=kind,
        keys=sorted(values) if kind == SecretKind.GENERIC else [REGISTRY_KEY],
        registry=registry,
        username=username,
        sealed_data=seal(values),
    )
    save_valid(secret)
    _audit(actor, "secret.created", secret, project, secret.as_audit_data())
    dispatch.request_project_data_sync(project.pk)
    return secret


@transaction.atomic
def update_project_secret(
    *,
    actor: Actor,
    secret: ProjectSecret,
    data: dict[str, str] | None = None,
    registry: str | None = None,
    username: str | None = None,
    password: str | None = None,
    **fixed: Any,
) -> ProjectSecret:
    """Replace the secret's values (all of them: values are never read back to merge)."""
    project = secret.project
    _require_lead(actor, project.team, "change project secrets")
    for field in ("name", "kind", "project"):
        if field in fixed and fixed[field] not in (getattr(secret, field), None):
            raise invalid_field(field, f"A secret's {field} is fixed once stored.")
    unknown = set(fixed) - {"name", "kind", "project"}
    if unknown:
        raise DomainError("invalid", f"Unknown fields: {', '.join(sorted(unknown))}.")
    if secret.kind == SecretKind.REGISTRY:
        registry = secret.registry if registry is None else registry
        username = secret.username if username is None else username
        if password is None:
            raise invalid_field("password", "Give the password again: it is never read back.")
        values = _validated_values(secret.kind, None, registry, username, password)
        secret.registry, secret.username = registry, username
    else:
        if data is None:
            raise invalid_field("data", "Give every key and value: values are never read back.")
        values = _validated_values(secret.kind, data, "", "", "")
        secret.keys = sorted(values)
    secret.sealed_data = seal(values)
    secret.revision += 1
    save_valid(secret)
    _audit(actor, "secret.updated", secret, project, secret.as_audit_data())
    dispatch.request_project_data_sync(project.pk)
    return secret


@transaction.atomic
def delete_project_secret(*, actor: Actor, secret: ProjectSecret) -> None:
    """Forget the secret and delete the cluster's copy; running pods keep what they read."""
    project = secret.project
    _require_lead(actor, project.team, "delete project secrets")
    _audit(actor, "secret.deleted", secret, project, secret.as_audit_data())
    name = secret.cluster_name
    secret.delete()
    dispatch.request_project_data_removal(project.namespace, "Secret", [name])


# Requests -----------------------------------------------------------------------------------


def validate_secret_env(*, project: Project, secret_env: list[dict[str, str]]) -> None:
    """Every reference names a generic secret of the project and one of its keys (else 400)."""
    if not secret_env:
        return
    secrets = {
        s.name: s
        for s in ProjectSecret.objects.filter(
            project=project, name__in={ref.get("secret") for ref in secret_env}
        )
    }
    for ref in secret_env:
        secret = secrets.get(ref["secret"])
        if secret is None or secret.kind != SecretKind.GENERIC:
            raise invalid_field(
                "secret_env", f"Project {project} has no secret named '{ref['secret']}'."
            )
        if ref["key"] not in secret.keys:
            raise invalid_field(
                "secret_env",
                f"Secret '{secret.name}' has no key '{ref['key']}' (it has: "
                f"{', '.join(secret.keys)}).",
            )
