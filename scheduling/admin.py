"""The scheduling app's data in the Django admin, read-only (see tenants.admin)."""

from __future__ import annotations

from django.contrib import admin

from scheduling.models import (
    ApprovalRule,
    Cluster,
    Flavor,
    GpuDevice,
    GpuRequest,
    Node,
    NodePool,
    Quota,
    ReclaimPolicy,
    Tier,
)
from tenants.admin import ReadOnlyAdmin, ReadOnlyInline


@admin.register(Tier)
class TierAdmin(ReadOnlyAdmin):
    list_display = ["name", "slug", "max_runtime_seconds"]
    filter_horizontal = ["allowed_teams", "allowed_projects"]


class NodeInline(ReadOnlyInline):
    model = Node
    fields = ["name", "gpu_model", "is_schedulable"]


@admin.register(Cluster)
class ClusterAdmin(ReadOnlyAdmin):
    """Clusters without their kubeconfig: it is sealed and never shown (scheduling.services)."""

    list_display = ["name", "slug", "api_server", "scheduler", "is_active", "last_contact_at"]
    list_filter = ["is_active", "scheduler"]
    exclude = ["kubeconfig_sealed"]


@admin.register(NodePool)
class NodePoolAdmin(ReadOnlyAdmin):
    list_display = [
        "name",
        "tier",
        "cluster",
        "sharing_mode",
        "scheduler_name",
        "placement",
        "scoring",
        "allocation",
        "short_reserve_fraction",
        "short_max_runtime_seconds",
        "is_pilot",
        "pilot_until",
    ]
    list_filter = ["sharing_mode", "tier", "is_pilot"]
    filter_horizontal = ["pilot_teams"]
    inlines = [NodeInline]


class GpuDeviceInline(ReadOnlyInline):
    model = GpuDevice


@admin.register(Node)
class NodeAdmin(ReadOnlyAdmin):
    list_display = ["name", "pool", "gpu_model", "is_schedulable", "synced_at"]
    list_filter = ["pool", "is_schedulable"]
    inlines = [GpuDeviceInline]


@admin.register(Flavor)
class FlavorAdmin(ReadOnlyAdmin):
    list_display = ["name", "pool", "kind", "gpu_model", "gpu_equivalent", "is_active"]
    filter_horizontal = ["other_pools"]
    list_filter = ["kind", "pool"]


@admin.register(Quota)
class QuotaAdmin(ReadOnlyAdmin):
    list_display = ["team", "project", "flavor", "guaranteed", "limit"]
    list_filter = ["team", "flavor"]


@admin.register(ApprovalRule)
class ApprovalRuleAdmin(ReadOnlyAdmin):
    list_display = [
        "tier",
        "auto_approve_within_guaranteed",
        "auto_approve_max_priority",
        "lead_approves_whole_cards",
        "approval_ttl_hours",
    ]


@admin.register(GpuRequest)
class GpuRequestAdmin(ReadOnlyAdmin):
    """Requests change state only through the lifecycle services."""

    list_display = ["id", "owner", "project", "flavor", "gpu_count", "status", "created_at"]
    list_filter = ["status", "team", "flavor"]


@admin.register(ReclaimPolicy)
class ReclaimPolicyAdmin(ReadOnlyAdmin):
    list_display = [
        "tier",
        "idle_threshold_percent",
        "idle_window_seconds",
        "reclaim_idle",
        "pending_timeout_seconds",
        "max_attempts",
    ]
