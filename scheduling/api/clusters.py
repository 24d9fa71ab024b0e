"""The API of the cluster registry, `/api/v1/clusters/`.

Clusters are catalogue: everyone with a role reads them (name, API server, scheduler mode,
health, pools); platform admins register, change and delete them. The kubeconfig is write-only:
it is accepted on create and update, and no response carries it or anything sealed from it.
"""

from __future__ import annotations

from typing import Any, cast

from drf_spectacular.utils import extend_schema_field
from rest_framework import permissions, serializers
from rest_framework.serializers import BaseSerializer

from scheduling.choices import SchedulerMode
from scheduling.models import Cluster
from scheduling.services import clusters as services
from tenants.api.base import JsonCharField, ScopedModelViewSet
from tenants.api.permissions import PlatformAdminWrites


class ClusterHealthSerializer(serializers.Serializer):
    """Whether the portal reaches the cluster: its last contact and its last error since."""

    reachable = serializers.BooleanField(source="is_reachable")
    last_contact_at = serializers.DateTimeField(allow_null=True)
    last_error = JsonCharField()
    last_error_at = serializers.DateTimeField(allow_null=True)
    activity_signal_at = serializers.DateTimeField(
        allow_null=True, help_text="When GPU activity last came from the cluster's Prometheus."
    )
    activity_gap_since = serializers.DateTimeField(
        allow_null=True,
        help_text="Since when no GPU activity has come (idle reclaim is paused for the "
        "cluster's work); null while it flows.",
    )
    activity_gap_reason = serializers.CharField()


class ClusterSerializer(serializers.ModelSerializer):
    """A cluster as people see it; `kubeconfig` goes in only (create, or replace on update)."""

    kubeconfig = JsonCharField(
        write_only=True,
        required=False,
        allow_blank=True,
        trim_whitespace=False,
        max_length=services.MAX_KUBECONFIG_CHARS,
        style={"base_template": "textarea.html"},
        help_text=(
            "The kubeconfig the portal reaches the cluster with (its current context). Required "
            "to register; on update it replaces the stored one. Never returned."
        ),
    )
    scheduler = serializers.ChoiceField(
        choices=SchedulerMode.choices,
        required=False,
        help_text="Who admits the cluster's requests; the local cluster reads the SCHEDULER "
        "setting, which is what a response shows.",
    )
    is_local = serializers.BooleanField(read_only=True)
    health = serializers.SerializerMethodField()
    pools: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        many=True, read_only=True, slug_field="slug"
    )

    class Meta:
        model = Cluster
        fields = [
            "id",
            "name",
            "slug",
            "api_server",
            "kubeconfig",
            "scheduler",
            "is_active",
            "prometheus_url",
            "is_local",
            "health",
            "pools",
            "created_at",
        ]
        read_only_fields = ["id", "api_server", "is_local", "health", "pools", "created_at"]

    def to_representation(self, instance: Cluster) -> dict[str, Any]:
        data = super().to_representation(instance)
        data["scheduler"] = instance.scheduler_mode  # the effective mode
        return data

    @extend_schema_field(ClusterHealthSerializer)
    def get_health(self, cluster: Cluster) -> dict[str, Any]:
        return dict(ClusterHealthSerializer(cluster).data)


class ClusterViewSet(ScopedModelViewSet):
    """The clusters the portal runs work on: everyone with a role reads, platform admins write."""

    permission_classes = [permissions.IsAuthenticated, PlatformAdminWrites]
    queryset = Cluster.objects.prefetch_related("pools")
    serializer_class = ClusterSerializer
    filterset_fields = ["slug", "is_active", "scheduler"]

    def perform_create(self, serializer: BaseSerializer) -> None:
        fields = dict(serializer.validated_data)
        serializer.instance = services.register_cluster(
            actor=self.request.user,
            kubeconfig_text=fields.pop("kubeconfig", ""),
            **fields,
        )

    def perform_update(self, serializer: BaseSerializer) -> None:
        fields = dict(serializer.validated_data)
        cluster = services.update_cluster(
            actor=self.request.user,
            cluster=cast(Cluster, serializer.instance),
            kubeconfig_text=fields.pop("kubeconfig", ""),
            **fields,
        )
        serializer.instance = self.get_queryset().get(pk=cluster.pk)

    def perform_destroy(self, instance: Cluster) -> None:
        services.delete_cluster(actor=self.request.user, cluster=instance)
