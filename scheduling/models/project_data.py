"""A project's data: the team's storage quota, the project's workspace and its members'
home volumes, and the project's secrets."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q

from tenants.models import Project, ScopedQuerySet, Team
from tenants.scope import Scope


class TeamScopedQuerySet(ScopedQuerySet):
    """Rows of a team's projects: members of the team see them, admins all, finance none."""

    team_path = "project__team_id"

    def for_scope(self, scope: Scope) -> TeamScopedQuerySet:
        if scope.is_platform_admin:
            return self.all()
        return self.filter(**{f"{self.team_path}__in": scope.team_ids})


class StorageQuotaQuerySet(TeamScopedQuerySet):
    team_path = "team_id"


class StorageQuota(models.Model):
    """How many GiB of persistent volumes a team's projects may claim in all (admin-set):
    every project workspace and every home volume counts its size."""

    team = models.OneToOneField(Team, on_delete=models.CASCADE, related_name="storage_quota")
    limit_gib = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    objects = StorageQuotaQuerySet.as_manager()

    class Meta:
        ordering = ["team__name"]

    def __str__(self) -> str:
        return f"{self.team} storage: {self.limit_gib} GiB"

    def as_audit_data(self) -> dict[str, Any]:
        return {"team": self.team_id, "limit_gib": self.limit_gib}


class VolumeAccessMode(models.TextChoices):
    READ_WRITE_MANY = "ReadWriteMany", "shared by every pod (ReadWriteMany)"
    READ_WRITE_ONCE = "ReadWriteOnce", "one node at a time (ReadWriteOnce)"


class ProjectWorkspace(models.Model):
    """A project's shared PersistentVolumeClaim, mounted at /workspace in all its workloads;
    `home_size_gib` above zero also gives each member who asks a home volume for notebooks."""

    project = models.OneToOneField(Project, on_delete=models.CASCADE, related_name="workspace")
    storage_class = models.CharField(
        max_length=253, blank=True, help_text="Empty: the cluster's default storage class."
    )
    size_gib = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    access_mode = models.CharField(
        max_length=16, choices=VolumeAccessMode.choices, default=VolumeAccessMode.READ_WRITE_MANY
    )
    home_size_gib = models.PositiveIntegerField(
        default=0, help_text="Size of each member's home volume; 0 turns home volumes off."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = TeamScopedQuerySet.as_manager()

    class Meta:
        ordering = ["project__team__name", "project__name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(size_gib__gte=1),
                name="workspace_size_positive",
                violation_error_message="A workspace holds at least 1 GiB.",
            ),
        ]

    def __str__(self) -> str:
        return f"workspace of {self.project_id} ({self.size_gib} GiB)"

    def as_audit_data(self) -> dict[str, Any]:
        return {
            "project": self.project_id,
            "storage_class": self.storage_class,
            "size_gib": self.size_gib,
            "home_size_gib": self.home_size_gib,
        }


class HomeVolume(models.Model):
    """One member's home volume in a project, made the first time they ask for it; kept (and
    counted against the storage quota) until the workspace goes."""

    workspace = models.ForeignKey(
        ProjectWorkspace, on_delete=models.CASCADE, related_name="home_volumes"
    )
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    size_gib = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "user"],
                name="home_volume_one_per_user",
                violation_error_message="The user already has a home volume here.",
            ),
        ]

    def __str__(self) -> str:
        return f"home of {self.user_id} in workspace {self.workspace_id}"


class SecretKind(models.TextChoices):
    GENERIC = "generic", "key/value pairs"
    REGISTRY = "registry", "image registry login"


class ProjectSecret(models.Model):
    """Key/value secrets (or a registry login) a project's lead stores for its workloads.

    Values are write-only: `sealed_data` holds them encrypted (scheduling/sealing.py) only so
    the Kubernetes Secret can be made again in a re-created namespace; `keys` (and for a
    registry login `registry` and `username`) are all that is ever shown. `revision` grows on
    every write so the cluster's copy is replaced when it is older.
    """

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="secrets")
    name = models.SlugField(
        max_length=40, help_text="Lowercase letters, digits and '-'; referenced by requests."
    )
    kind = models.CharField(max_length=10, choices=SecretKind.choices, default=SecretKind.GENERIC)
    keys = models.JSONField(default=list, blank=True)
    registry = models.CharField(max_length=253, blank=True)
    username = models.CharField(max_length=253, blank=True)
    sealed_data = models.TextField(blank=True, editable=False)
    revision = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = TeamScopedQuerySet.as_manager()

    class Meta:
        ordering = ["project__team__name", "project__name", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["project", "name"],
                name="project_secret_name_unique",
                violation_error_message="The project already has a secret with this name.",
            ),
        ]

    def __str__(self) -> str:
        return f"secret {self.name} of project {self.project_id}"

    @property
    def cluster_name(self) -> str:
        """The Kubernetes Secret's name in the project namespace."""
        return f"gp-secret-{self.name}"

    def as_audit_data(self) -> dict[str, Any]:
        """What the audit trail may keep: names, never values."""
        return {"project": self.project_id, "name": self.name, "kind": self.kind, "keys": self.keys}
