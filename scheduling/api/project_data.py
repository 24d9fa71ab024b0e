"""The API of a project's data: team storage quotas, project workspaces and project secrets.

Secret values are write-only: a response names a secret's keys (and a registry login's
registry and username), never a value.
"""

from __future__ import annotations

from typing import Any, cast

from drf_spectacular.utils import extend_schema_field
from rest_framework import permissions, serializers
from rest_framework.serializers import BaseSerializer

from scheduling.models import (
    ProjectSecret,
    ProjectWorkspace,
    SecretKind,
    StorageQuota,
    VolumeAccessMode,
)
from scheduling.services import project_data as services
from tenants.api.base import (
    FixedOnceCreatedMixin,
    JsonCharField,
    JsonSlugField,
    ScopedModelViewSet,
    ScopedPrimaryKeyRelatedField,
)
from tenants.api.permissions import PlatformAdminWrites
from tenants.models import Project, Team


class StorageQuotaSerializer(FixedOnceCreatedMixin, serializers.ModelSerializer):
    """How many GiB a team's workspaces and home volumes may claim, and how many they do."""

    team = ScopedPrimaryKeyRelatedField(queryset=Team.objects.all())
    limit_gib = serializers.IntegerField(min_value=0, max_value=10_000_000)
    used_gib = serializers.SerializerMethodField()

    class Meta:
        model = StorageQuota
        fields = ["id", "team", "limit_gib", "used_gib", "updated_at"]
        read_only_fields = ["id", "used_gib", "updated_at"]

    fixed_once_created = ("team",)

    @extend_schema_field(serializers.IntegerField())
    def get_used_gib(self, quota: StorageQuota) -> int:
        return services.storage_used_gib(team=quota.team)


class WorkspaceSerializer(serializers.ModelSerializer):
    """A project's workspace volume (mounted at /workspace) and its home volume size."""

    project = ScopedPrimaryKeyRelatedField(queryset=Project.objects.select_related("team"))
    size_gib = serializers.IntegerField(min_value=1, max_value=1_000_000)
    home_size_gib = serializers.IntegerField(min_value=0, max_value=100_000, default=0)
    storage_class = JsonCharField(max_length=253, allow_blank=True, default="")
    access_mode = serializers.ChoiceField(
        choices=VolumeAccessMode.choices, default=VolumeAccessMode.READ_WRITE_MANY
    )
    home_volume_count = serializers.IntegerField(source="home_volumes.count", read_only=True)

    class Meta:
        model = ProjectWorkspace
        fields = [
            "id",
            "project",
            "storage_class",
            "size_gib",
            "access_mode",
            "home_size_gib",
            "home_volume_count",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["id", "home_volume_count", "created_at", "updated_at"]


class ProjectSecretSerializer(serializers.ModelSerializer):
    """A project secret: `data` (generic) or `password` (registry) are write-only."""

    project = ScopedPrimaryKeyRelatedField(queryset=Project.objects.select_related("team"))
    name = JsonSlugField(max_length=40)
    kind = serializers.ChoiceField(choices=SecretKind.choices, default=SecretKind.GENERIC)
    # A field named like `Serializer.data`: the metaclass takes declared fields off the class.
    data = serializers.DictField(  # type: ignore[assignment]
        child=JsonCharField(max_length=65536, allow_blank=True, trim_whitespace=False),
        write_only=True,
        required=False,
        help_text="Key/value pairs of a generic secret; never returned.",
    )
    registry = JsonCharField(max_length=253, required=False, allow_blank=True)
    username = JsonCharField(max_length=253, required=False, allow_blank=True)
    password = JsonCharField(
        max_length=4096,
        write_only=True,
        required=False,
        trim_whitespace=False,
        help_text="A registry login's password or token; never returned.",
        style={"input_type": "password"},
    )
    keys = serializers.ListField(child=JsonCharField(), read_only=True)
    kubernetes_name = JsonCharField(source="cluster_name", read_only=True)

    class Meta:
        model = ProjectSecret
        fields = [
            "id",
            "project",
            "name",
            "kind",
            "keys",
            "registry",
            "username",
            "data",
            "password",
            "kubernetes_name",
            "revision",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["id", "keys", "kubernetes_name", "revision", "created_at", "updated_at"]
        validators: list[Any] = []


class StorageQuotaViewSet(ScopedModelViewSet):
    """Teams' storage quotas: members read their team's, platform admins set them."""

    permission_classes = [permissions.IsAuthenticated, PlatformAdminWrites]
    queryset = StorageQuota.objects.select_related("team")
    serializer_class = StorageQuotaSerializer
    filterset_fields = ["team"]

    def perform_create(self, serializer: BaseSerializer) -> None:
        serializer.instance = services.set_storage_quota(
            actor=self.request.user, **serializer.validated_data
        )

    def perform_update(self, serializer: BaseSerializer) -> None:
        quota = cast(StorageQuota, serializer.instance)
        serializer.instance = services.set_storage_quota(
            actor=self.request.user,
            team=quota.team,
            limit_gib=serializer.validated_data.get("limit_gib", quota.limit_gib),
        )

    def perform_destroy(self, instance: StorageQuota) -> None:
        services.delete_storage_quota(actor=self.request.user, quota=instance)


class WorkspaceViewSet(ScopedModelViewSet):
    """Project workspaces: the team reads them, its lead sets them up, grows and drops them."""

    queryset = ProjectWorkspace.objects.select_related("project", "project__team")
    serializer_class = WorkspaceSerializer
    filterset_fields = ["project"]

    def perform_create(self, serializer: BaseSerializer) -> None:
        serializer.instance = services.create_workspace(
            actor=self.request.user, **serializer.validated_data
        )

    def perform_update(self, serializer: BaseSerializer) -> None:
        serializer.instance = services.update_workspace(
            actor=self.request.user,
            workspace=cast(ProjectWorkspace, serializer.instance),
            **serializer.validated_data,
        )

    def perform_destroy(self, instance: ProjectWorkspace) -> None:
        services.delete_workspace(actor=self.request.user, workspace=instance)


class ProjectSecretViewSet(ScopedModelViewSet):
    """Project secrets by name and keys: the team reads those, its lead writes the values."""

    queryset = ProjectSecret.objects.select_related("project", "project__team")
    serializer_class = ProjectSecretSerializer
    filterset_fields = ["project", "kind"]

    def perform_create(self, serializer: BaseSerializer) -> None:
        serializer.instance = services.create_project_secret(
            actor=self.request.user, **serializer.validated_data
        )

    def perform_update(self, serializer: BaseSerializer) -> None:
        serializer.instance = services.update_project_secret(
            actor=self.request.user,
            secret=cast(ProjectSecret, serializer.instance),
            **serializer.validated_data,
        )

    def perform_destroy(self, instance: ProjectSecret) -> None:
        services.delete_project_secret(actor=self.request.user, secret=instance)
