"""A project's workspace, home volumes and secrets on the cluster, and what a request's pod
mounts and reads of them.

The database holds what was asked (sizes, names, sealed values); this module turns it into
`ProjectDataSpec`s for the backend and the volume, env and pull-secret fields of a
`WorkloadSpec`. Secret values are unsealed only here, only to hand them to the backend.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runtime.cluster.base import (
    HOME_MOUNT_PATH,
    WORKSPACE_MOUNT_PATH,
    ClusterBackend,
    ProjectDataSpec,
    SecretEnvVar,
    SecretSpec,
    VolumeClaimSpec,
    VolumeMount,
)
from runtime.services.propagation import project_spec
from scheduling.models import GpuRequest, HomeVolume, ProjectSecret, ProjectWorkspace, SecretKind
from scheduling.sealing import unseal
from scheduling.services.project_data import REGISTRY_KEY, home_claim_name
from tenants.models import Project

WORKSPACE_CLAIM = "workspace"


def _workspace_claim(workspace: ProjectWorkspace) -> VolumeClaimSpec:
    return VolumeClaimSpec(
        name=WORKSPACE_CLAIM,
        size_gib=workspace.size_gib,
        storage_class=workspace.storage_class or None,
        access_mode=workspace.access_mode,  # type: ignore[arg-type]
    )


def _home_claim(home: HomeVolume, workspace: ProjectWorkspace) -> VolumeClaimSpec:
    return VolumeClaimSpec(
        name=home_claim_name(home.user),
        size_gib=home.size_gib,
        storage_class=workspace.storage_class or None,
        access_mode="ReadWriteOnce",
    )


def registry_config(registry: str, username: str, password: str) -> str:
    """The `.dockerconfigjson` of one registry login (what `kubectl create secret
    docker-registry` writes)."""
    host = registry.split("://", 1)[-1].rstrip("/")
    auth = base64.b64encode(f"{username}:{password}".encode()).decode()
    return json.dumps(
        {"auths": {host: {"username": username, "password": password, "auth": auth}}},
        sort_keys=True,
    )


def secret_spec(secret: ProjectSecret) -> SecretSpec:
    """The cluster's copy of a project secret, values unsealed."""
    values = unseal(secret.sealed_data)
    if secret.kind == SecretKind.REGISTRY:
        config = registry_config(secret.registry, secret.username, values.get("password", ""))
        return SecretSpec(
            name=secret.cluster_name,
            revision=secret.revision,
            data={REGISTRY_KEY: config},
            type="kubernetes.io/dockerconfigjson",
        )
    return SecretSpec(name=secret.cluster_name, revision=secret.revision, data=values)


def project_data_spec(project: Project) -> ProjectDataSpec:
    """Everything the project's namespace must hold: workspace, every home volume made so
    far, and every secret."""
    workspace = ProjectWorkspace.objects.filter(project=project).first()
    claims: list[VolumeClaimSpec] = []
    if workspace is not None:
        claims.append(_workspace_claim(workspace))
        homes = HomeVolume.objects.filter(workspace=workspace).select_related("user")
        claims += [_home_claim(home, workspace) for home in homes.order_by("pk")]
    secrets = ProjectSecret.objects.filter(project=project).order_by("name")
    return ProjectDataSpec(
        team_slug=project.team.slug,
        project_slug=project.slug,
        namespace=project.namespace,
        claims=tuple(claims),
        secrets=tuple(secret_spec(s) for s in secrets),
    )


def sync_project_data(*, project_id: int, backend: ClusterBackend) -> int:
    """Converge the project's namespace, claims and Secrets on the database; returns how
    many objects the namespace must hold. Safe to repeat; a deleted project is nothing."""
    project = Project.objects.select_related("team").filter(pk=project_id).first()
    if project is None:
        return 0
    spec = project_data_spec(project)
    backend.ensure_project(project_spec(project))
    if not spec.is_empty:
        backend.ensure_project_data(spec)
    return len(spec.claims) + len(spec.secrets)


@dataclass(frozen=True, slots=True)
class RequestData:
    """The project data one request's pod uses: the workspace, the owner's home volume when
    asked for, the secrets its env reads and the project's registry logins. Read once per
    launch, for what must exist before the pod starts and for the pod's own fields."""

    workspace: ProjectWorkspace | None
    home: HomeVolume | None
    secrets: tuple[ProjectSecret, ...]


def request_data(request: GpuRequest) -> RequestData:
    """The request's project data as the database holds it now."""
    workspace = ProjectWorkspace.objects.filter(project=request.project_id).first()
    home = None
    if workspace is not None and request.home_volume:
        home = (
            HomeVolume.objects.filter(workspace=workspace, user=request.owner_id)
            .select_related("user")
            .first()
        )
    referenced = {ref["secret"] for ref in request.secret_env}
    secrets = tuple(
        s
        for s in ProjectSecret.objects.filter(project=request.project_id).order_by("name")
        if s.kind == SecretKind.REGISTRY or s.name in referenced
    )
    return RequestData(workspace=workspace, home=home, secrets=secrets)


def launch_data_spec(request: GpuRequest, data: RequestData) -> ProjectDataSpec:
    """What of the request's `data` must exist in its namespace before the pod starts."""
    workspace, home = data.workspace, data.home
    claims = [_workspace_claim(workspace)] if workspace is not None else []
    if home is not None and workspace is not None:
        claims.append(_home_claim(home, workspace))
    return ProjectDataSpec(
        team_slug=request.team.slug,
        project_slug=request.project.slug,
        namespace=request.project.namespace,
        claims=tuple(claims),
        secrets=tuple(secret_spec(s) for s in data.secrets),
    )


def ensure_for_launch(
    request: GpuRequest,
    data: RequestData,
    backend: ClusterBackend,
    ensure: Callable[[str, object, Callable[[], None]], bool] | None = None,
) -> None:
    """Make sure the request's claims and Secrets exist (a namespace re-created since the
    lead stored them has none): no call for a request that uses none, and through `ensure`
    (the launch path's memory of what it ensured) none for data ensured a moment ago."""
    spec = launch_data_spec(request, data)
    if spec.is_empty:
        return
    names = [c.name for c in spec.claims] + [s.name for s in spec.secrets]
    key = f"data:{spec.namespace}:{','.join(names)}"
    if ensure is None:
        backend.ensure_project_data(spec)
    else:
        ensure(key, spec, lambda: backend.ensure_project_data(spec))


def workload_fields(request: GpuRequest, data: RequestData) -> dict[str, Any]:
    """The `WorkloadSpec` fields of the request's data and host resources."""
    workspace, home, secrets = data.workspace, data.home, data.secrets
    volumes = []
    if workspace is not None:
        volumes.append(VolumeMount(claim_name=WORKSPACE_CLAIM, mount_path=WORKSPACE_MOUNT_PATH))
    if home is not None:
        volumes.append(
            VolumeMount(claim_name=home_claim_name(home.user), mount_path=HOME_MOUNT_PATH)
        )
    by_name = {s.name: s for s in secrets}
    return {
        "cpu": f"{request.cpu_millicores}m" if request.cpu_millicores else None,
        "memory": f"{request.memory_mib}Mi" if request.memory_mib else None,
        "shm_mib": request.shm_mib,
        "volumes": tuple(volumes),
        "secret_env": tuple(
            SecretEnvVar(
                name=ref["name"], secret_name=by_name[ref["secret"]].cluster_name, key=ref["key"]
            )
            for ref in request.secret_env
            if ref["secret"] in by_name
        ),
        "image_pull_secrets": tuple(
            s.cluster_name for s in secrets if s.kind == SecretKind.REGISTRY
        ),
    }
