from __future__ import annotations

import re
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from scheduling.choices import Priority, WorkloadKind
from scheduling.engine.blockers import BLOCKER_CODES
from scheduling.models import (
    REQUEST_BODY_FIELDS,
    ApprovalRule,
    Cluster,
    Flavor,
    GpuRequest,
    NodePool,
    Quota,
    ReclaimPolicy,
    RequestTemplate,
    Tier,
)
from scheduling.selectors.connect import connect_url, current_allocation
from scheduling.selectors.preemptions import last_preemption
from scheduling.selectors.quotas import QuotaUsage, flavor_unit
from scheduling.services.blockers import shown_blocker
from scheduling.services.requests import BLANK_NAME, GpuRequestSpec
from tenants.api.base import (
    FixedOnceCreatedMixin,
    JsonBooleanField,
    JsonCharField,
    JsonListRelatedMixin,
    JsonSlugField,
    ScopedPrimaryKeyRelatedField,
)
from tenants.models import Project, Team

SLUG_PATTERN = re.compile(r"[-a-zA-Z0-9_]+")


class SlugReferenceField(JsonListRelatedMixin, serializers.SlugRelatedField):
    """An object named by its slug; text that cannot be a slug (control characters, say) does
    not exist either, and is refused before it reaches the database."""

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, str) or not SLUG_PATTERN.fullmatch(data):
            self.fail("does_not_exist", slug_name=self.slug_field, value=str(data)[:80])
        return super().to_internal_value(data)


class TierSerializer(serializers.ModelSerializer):
    """A tier; its allowed teams and projects are ids (both empty: open to every team)."""

    allowed_teams = ScopedPrimaryKeyRelatedField(
        queryset=Team.objects.all(), many=True, required=False
    )
    allowed_projects = ScopedPrimaryKeyRelatedField(
        queryset=Project.objects.all(), many=True, required=False
    )

    class Meta:
        model = Tier
        fields = [
            "id",
            "name",
            "slug",
            "description",
            "max_runtime_seconds",
            "rank",
            "allowed_teams",
            "allowed_projects",
            "max_cpu_millicores",
            "max_memory_mib",
            "max_shm_mib",
            "preemption_grace_seconds",
            "lends_unassigned",
        ]
        read_only_fields = ["id"]


class NodePoolSerializer(serializers.ModelSerializer):
    tier: serializers.SlugRelatedField[Any] = SlugReferenceField(
        slug_field="slug", queryset=Tier.objects.all()
    )
    cluster = SlugReferenceField(
        slug_field="slug",
        queryset=Cluster.objects.all(),
        required=False,
        help_text="The cluster the pool's nodes are in (slug); the local cluster if left out.",
    )
    node_count = serializers.IntegerField(read_only=True)
    gpu_count = serializers.IntegerField(read_only=True)
    short_reserve_label = JsonCharField(
        read_only=True, help_text='How the short-request reserve reads ("" when off).'
    )

    class Meta:
        model = NodePool
        fields = [
            "id",
            "name",
            "slug",
            "tier",
            "cluster",
            "sharing_mode",
            "node_selector",
            "taints",
            "scheduler_name",
            "placement",
            "scoring",
            "allocation",
            "allowed_kinds",
            "short_reserve_fraction",
            "short_max_runtime_seconds",
            "short_reserve_label",
            "node_count",
            "gpu_count",
        ]
        read_only_fields = ["id", "short_reserve_label", "node_count", "gpu_count"]


class FlavorSerializer(serializers.ModelSerializer):
    pool: serializers.SlugRelatedField[Any] = SlugReferenceField(
        slug_field="slug", queryset=NodePool.objects.all()
    )
    other_pools = SlugReferenceField(
        slug_field="slug",
        queryset=NodePool.objects.all(),
        many=True,
        required=False,
        help_text="Other pools (slugs) with the same cards, e.g. in another cluster.",
    )
    tier = JsonCharField(source="pool.tier.slug", read_only=True)
    resource_names = serializers.ListField(child=JsonCharField(), read_only=True)

    class Meta:
        model = Flavor
        fields = [
            "id",
            "name",
            "slug",
            "pool",
            "other_pools",
            "tier",
            "kind",
            "gpu_model",
            "gpu_memory_mib",
            "gpu_cores_percent",
            "mig_profile",
            "gpu_equivalent",
            "resource_names",
            "is_active",
            "default_cpu_millicores",
            "default_memory_mib",
            "default_shm_mib",
        ]
        read_only_fields = ["id", "tier", "resource_names"]


class TierRuleSerializer(FixedOnceCreatedMixin, serializers.ModelSerializer):
    """A rule that belongs to one tier: the tier is named by slug and fixed once created."""

    tier: serializers.SlugRelatedField[Any] = SlugReferenceField(
        slug_field="slug", queryset=Tier.objects.all()
    )
    fixed_once_created = ("tier",)

    def validate_tier(self, tier: Tier) -> Tier:
        if self.Meta.model.objects.filter(tier=tier).exists():  # type: ignore[attr-defined]
            raise serializers.ValidationError(f"Tier {tier.slug} already has one: change it.")
        return tier


class ApprovalRuleSerializer(TierRuleSerializer):
    class Meta:
        model = ApprovalRule
        fields = [
            "id",
            "tier",
            "auto_approve_within_guaranteed",
            "auto_approve_max_priority",
            "lead_approves_whole_cards",
            "approval_ttl_hours",
        ]
        read_only_fields = ["id"]


class ReclaimPolicySerializer(TierRuleSerializer):
    class Meta:
        model = ReclaimPolicy
        fields = [
            "id",
            "tier",
            "idle_threshold_percent",
            "idle_window_seconds",
            "notebook_idle_window_seconds",
            "idle_warning_seconds",
            "idle_marks_preemptible",
            "reclaim_idle",
            "timeout_warning_seconds",
            "pending_timeout_seconds",
            "max_attempts",
            "notebook_keep_alive_seconds",
        ]
        read_only_fields = ["id"]


class QuotaSerializer(FixedOnceCreatedMixin, serializers.ModelSerializer):
    team = ScopedPrimaryKeyRelatedField(queryset=Team.objects.all())
    project = ScopedPrimaryKeyRelatedField(
        queryset=Project.objects.all(), allow_null=True, required=False, default=None
    )
    flavor = ScopedPrimaryKeyRelatedField(queryset=Flavor.objects.all())
    guaranteed = serializers.IntegerField(min_value=0, max_value=100_000)
    limit = serializers.IntegerField(min_value=0, max_value=100_000)
    used = serializers.SerializerMethodField(help_text="Units held by admitted or running work.")
    queued = serializers.SerializerMethodField(help_text="Units approved and waiting to start.")
    borrowed = serializers.SerializerMethodField(
        help_text="The part of `used` above the guarantee: it may be preempted."
    )
    unit = serializers.SerializerMethodField(
        help_text="What the figures count: GPUs, vGPU shares or MIG instances."
    )

    class Meta:
        model = Quota
        fields = [
            "id",
            "team",
            "project",
            "flavor",
            "guaranteed",
            "limit",
            "used",
            "queued",
            "borrowed",
            "unit",
            "updated_at",
        ]
        read_only_fields = ["id", "used", "queued", "borrowed", "unit", "updated_at"]
        validators: list[Any] = []

    fixed_once_created = ("team", "project", "flavor")

    def _usage(self, quota: Quota) -> QuotaUsage:
        usage: dict[tuple[int, int | None, int], QuotaUsage] = self.context.get("quota_usage", {})
        return usage.get((quota.team_id, quota.project_id, quota.flavor_id), QuotaUsage())

    def get_used(self, quota: Quota) -> int:
        return self._usage(quota).used

    def get_queued(self, quota: Quota) -> int:
        return self._usage(quota).queued

    def get_borrowed(self, quota: Quota) -> int:
        return self._usage(quota).borrowed

    def get_unit(self, quota: Quota) -> str:
        return flavor_unit(quota.flavor)


REQUEST_WRITABLE_FIELDS = ["name", "project", *REQUEST_BODY_FIELDS, "cluster", "reason"]
REQUEST_READ_ONLY_FIELDS = [
    "id",
    "team",
    "owner",
    "gpu_equivalent",
    "status",
    "status_reason",
    "needs_lead_approval_because",
    "approved_by",
    "decision_comment",
    "approval_expires_at",
    "waiting_reason",
    "queue_position",
    "estimated_start_at",
    "estimate_low_at",
    "estimate_high_at",
    "attempt",
    "idle_warned_at",
    "idle_exempt_until",
    "timeout_warned_at",
    "created_at",
    "updated_at",
    "approved_at",
    "queued_at",
    "started_at",
    "finished_at",
    "preemption_reason",
    "preempted_at",
    "preemption_deadline_at",
]


# Read from the current attempt's allocation (what workload sync last saw) or computed; not
# columns of the request.
REQUEST_WORKLOAD_FIELDS = [
    "connect_url",
    "node_names",
    "pod_names",
    "exit_code",
    "termination_reason",
]


class SecretEnvSerializer(serializers.Serializer):
    """One environment variable read from a project secret's key."""

    name = serializers.RegexField(r"^[A-Za-z_][A-Za-z0-9_.-]*$", max_length=253)
    secret = JsonSlugField(max_length=40)
    key = serializers.RegexField(r"^[-._a-zA-Z0-9]{1,253}$", max_length=253)


class BlockerSerializer(serializers.Serializer):
    """What most keeps a waiting request from starting (docs/blockers.md); {} when nothing does."""

    code = serializers.ChoiceField(choices=BLOCKER_CODES, required=False)
    message = JsonCharField(required=False, help_text="One sentence for people.")
    detail = serializers.DictField(
        required=False, help_text="The figures behind it; the keys depend on the code."
    )


class PreemptedBySerializer(serializers.Serializer):
    """The request a preemption made room for, as far as the preempted request's owner may see."""

    id = serializers.IntegerField()
    team = JsonCharField(help_text="The name of its team.")


class GpuRequestSerializer(serializers.ModelSerializer):
    """What a developer may write, and everything they may read back; status is read-only."""

    # Submitting reads the project's team and the flavor's pool, its cluster, tier and approval
    # rule: load them with it.
    project = ScopedPrimaryKeyRelatedField(queryset=Project.objects.select_related("team"))
    flavor = ScopedPrimaryKeyRelatedField(
        queryset=Flavor.objects.select_related("pool__cluster", "pool__tier__approval_rule")
    )
    cluster = SlugReferenceField(
        slug_field="slug",
        queryset=Cluster.objects.all(),
        required=False,
        allow_null=True,
        default=None,
        help_text="Run only on this cluster (slug): it must be active and hold one of the "
        "flavor's pools. Null: the engine chooses among the flavor's pools.",
    )
    owner = JsonCharField(source="owner.username", read_only=True)
    team: serializers.PrimaryKeyRelatedField[Any] = serializers.PrimaryKeyRelatedField(
        read_only=True
    )
    name = JsonCharField(max_length=80, required=False, error_messages={"blank": BLANK_NAME})
    gpu_count = serializers.IntegerField(min_value=1, max_value=1024)
    kind = serializers.ChoiceField(choices=WorkloadKind.choices, default=WorkloadKind.JOB)
    image = JsonCharField(max_length=255)
    command = serializers.ListField(
        child=JsonCharField(max_length=4096, allow_blank=True), required=False, default=list
    )
    env = serializers.DictField(
        child=JsonCharField(max_length=4096, allow_blank=True), required=False, default=dict
    )
    max_runtime_seconds = serializers.IntegerField(min_value=60, max_value=90 * 24 * 3600)
    priority = serializers.ChoiceField(choices=Priority.choices, default=Priority.NORMAL)
    is_preemptible = JsonBooleanField(default=False)
    allow_shared_node = JsonBooleanField(default=True)
    reason = JsonCharField(max_length=2000, required=False, allow_blank=True, default="")
    gpu_memory_mib = serializers.IntegerField(
        min_value=1, max_value=1_048_576, required=False, allow_null=True, default=None
    )
    gpu_cores_percent = serializers.IntegerField(
        min_value=1, max_value=100, required=False, allow_null=True, default=None
    )
    cpu_millicores = serializers.IntegerField(
        min_value=1,
        max_value=1_024_000,
        required=False,
        allow_null=True,
        default=None,
        help_text="CPU for the pod (request = limit); null: the flavor's default.",
    )
    memory_mib = serializers.IntegerField(
        min_value=1,
        max_value=16_777_216,
        required=False,
        allow_null=True,
        default=None,
        help_text="Memory for the pod (request = limit); null: the flavor's default.",
    )
    shm_mib = serializers.IntegerField(
        min_value=1,
        max_value=16_777_216,
        required=False,
        allow_null=True,
        default=None,
        help_text="Size of /dev/shm (memory-backed, counted in memory); null: the flavor's.",
    )
    home_volume = JsonBooleanField(
        default=False, help_text="Mount the owner's home volume of the project (notebooks)."
    )
    secret_env = SecretEnvSerializer(
        many=True,
        required=False,
        default=list,
        help_text="Variables read from the project's secrets (names only, never values).",
    )

    connect_url = serializers.SerializerMethodField(
        help_text="Where to open a running notebook or service; null for jobs and until running."
    )
    node_names = serializers.SerializerMethodField(help_text="The nodes the attempt runs on.")
    pod_names = serializers.SerializerMethodField(help_text="The attempt's pods, as sync saw.")
    exit_code = serializers.SerializerMethodField(
        help_text="The main container's last exit code; null until it exits."
    )
    termination_reason = serializers.SerializerMethodField(
        help_text='Why the container last ended, e.g. "OOMKilled: ..."; "" until it ends.'
    )
    blocker = serializers.SerializerMethodField(
        help_text="What most keeps it from starting: {code, message, detail}; {} when nothing."
    )
    approved_by_name = JsonCharField(
        source="approved_by.username",
        read_only=True,
        allow_null=True,
        help_text="The username of the lead who approved it (`approved_by` is their id); null "
        "when no lead did.",
    )
    preempted_by = serializers.SerializerMethodField(
        help_text="The request its last preemption made room for: {id, team} (the team's name; "
        "nothing more of another team's request); null when never preempted."
    )

    class Meta:
        model = GpuRequest
        fields = [
            *REQUEST_WRITABLE_FIELDS,
            *REQUEST_READ_ONLY_FIELDS,
            *REQUEST_WORKLOAD_FIELDS,
            "blocker",
            "preempted_by",
            "approved_by_name",
        ]
        read_only_fields = [
            *REQUEST_READ_ONLY_FIELDS,
            *REQUEST_WORKLOAD_FIELDS,
            "blocker",
            "preempted_by",
        ]

    def spec(self) -> GpuRequestSpec:
        """The validated body, for the submit service to check against the portal's rules."""
        return GpuRequestSpec(**self.validated_data)

    @extend_schema_field(JsonCharField(allow_null=True))
    def get_connect_url(self, gpu_request: GpuRequest) -> str | None:
        url = connect_url(gpu_request)
        request = self.context.get("request")
        if url is not None and url.startswith("/") and request is not None:
            return str(request.build_absolute_uri(url))
        return url

    @extend_schema_field(serializers.ListField(child=JsonCharField()))
    def get_node_names(self, gpu_request: GpuRequest) -> list[str]:
        allocation = current_allocation(gpu_request)
        return [n for n in allocation.node_name.split(",") if n] if allocation else []

    @extend_schema_field(serializers.ListField(child=JsonCharField()))
    def get_pod_names(self, gpu_request: GpuRequest) -> list[str]:
        allocation = current_allocation(gpu_request)
        return list(allocation.pod_names) if allocation else []

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_exit_code(self, gpu_request: GpuRequest) -> int | None:
        allocation = current_allocation(gpu_request)
        return allocation.exit_code if allocation else None

    @extend_schema_field(JsonCharField())
    def get_termination_reason(self, gpu_request: GpuRequest) -> str:
        allocation = current_allocation(gpu_request)
        return allocation.termination_reason if allocation else ""

    @extend_schema_field(BlockerSerializer())
    def get_blocker(self, gpu_request: GpuRequest) -> dict[str, Any]:
        return shown_blocker(gpu_request.status, gpu_request.blocker)

    @extend_schema_field(PreemptedBySerializer(allow_null=True))
    def get_preempted_by(self, gpu_request: GpuRequest) -> dict[str, Any] | None:
        preemption = last_preemption(gpu_request)
        if preemption is None or preemption.preempted_by is None:
            return None
        return {"id": preemption.preempted_by.id, "team": preemption.preempted_by.team}


class WhatIfQuerySerializer(serializers.Serializer):
    """The request one thinks of submitting: its project, size and max runtime."""

    project = serializers.IntegerField(min_value=1)
    gpu_count = serializers.IntegerField(min_value=1, max_value=1024, default=1)
    max_runtime_seconds = serializers.IntegerField(
        min_value=60, max_value=90 * 24 * 3600, default=7200
    )
    kind = serializers.ChoiceField(choices=WorkloadKind.choices, default=WorkloadKind.JOB)


class WhatIfSerializer(serializers.Serializer):
    """When a request of one flavor, submitted now, would likely start."""

    flavor = serializers.IntegerField(source="flavor.pk")
    flavor_name = JsonCharField(source="flavor.name")
    estimated_start_at = serializers.DateTimeField(
        source="start_at", allow_null=True, help_text="null: not within the forecast's horizon."
    )
    wait_seconds = serializers.FloatField(allow_null=True)


class RequestTemplateSerializer(FixedOnceCreatedMixin, serializers.ModelSerializer):
    """A saved request body: the caller's own, or (`is_shared`) the whole team's."""

    team = ScopedPrimaryKeyRelatedField(queryset=Team.objects.all())
    owner = JsonCharField(source="owner.username", read_only=True)
    flavor = ScopedPrimaryKeyRelatedField(
        queryset=Flavor.objects.all(), required=False, allow_null=True
    )
    kind = serializers.ChoiceField(choices=WorkloadKind.choices, default=WorkloadKind.JOB)
    command = serializers.ListField(
        child=JsonCharField(max_length=4096, allow_blank=True), required=False
    )
    env = serializers.DictField(
        child=JsonCharField(max_length=4096, allow_blank=True), required=False
    )
    gpu_count = serializers.IntegerField(min_value=1, max_value=1024, required=False)
    max_runtime_seconds = serializers.IntegerField(
        min_value=60, max_value=90 * 24 * 3600, required=False
    )
    secret_env = SecretEnvSerializer(many=True, required=False)

    class Meta:
        model = RequestTemplate
        fields = [
            "id",
            "name",
            "description",
            "team",
            "is_shared",
            "owner",
            "flavor",
            "gpu_count",
            "gpu_memory_mib",
            "gpu_cores_percent",
            "kind",
            "image",
            "command",
            "env",
            "max_runtime_seconds",
            "priority",
            "is_preemptible",
            "allow_shared_node",
            "cpu_millicores",
            "memory_mib",
            "shm_mib",
            "home_volume",
            "secret_env",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["id", "owner", "created_at", "updated_at"]

    fixed_once_created = ("team",)


class DecisionSerializer(serializers.Serializer):
    comment = JsonCharField(max_length=2000, required=False, allow_blank=True, default="")


class ApproveSerializer(DecisionSerializer):
    run_when_quota_frees = JsonBooleanField(
        required=False,
        default=False,
        help_text=(
            "Over the quota limit, approve anyway: the request stays pending_approval, marked, "
            "and is approved and queued as soon as the team's work frees enough quota. Without "
            "it, an approval over the limit is refused (409 quota_exceeded)."
        ),
    )


class CancelSerializer(serializers.Serializer):
    reason = JsonCharField(max_length=2000, required=False, allow_blank=True, default="")


class AskLeadSerializer(serializers.Serializer):
    reason = JsonCharField(max_length=2000)


class ExemptionSerializer(serializers.Serializer):
    hours = serializers.IntegerField(min_value=1, max_value=72)
    comment = JsonCharField(max_length=2000, required=False, allow_blank=True, default="")


class ExtensionSerializer(serializers.Serializer):
    seconds = serializers.IntegerField(min_value=60, max_value=30 * 24 * 3600)
    comment = JsonCharField(max_length=2000, required=False, allow_blank=True, default="")


class UtilisationPointSerializer(serializers.Serializer):
    """A sample, or with a time range one point of the request page's chart: its moment, the
    mean activity and the peak memory of the samples in it (null: none was taken)."""

    sampled_at = serializers.DateTimeField()
    activity_percent = serializers.FloatField(allow_null=True)
    memory_used_mib = serializers.IntegerField(allow_null=True)


class RequestSummarySerializer(serializers.Serializer):
    """The dashboard counters of `GET /api/v1/requests/summary/` (for the schema)."""

    total = serializers.IntegerField()
    by_status = serializers.DictField(child=serializers.IntegerField())
    waiting = serializers.IntegerField()
    running = serializers.IntegerField()
    committed_gpu_equivalent = serializers.DecimalField(max_digits=12, decimal_places=4)
