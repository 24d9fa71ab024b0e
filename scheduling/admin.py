from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from scheduling import dispatch
from scheduling.models import (
    ApprovalRule,
    Flavor,
    GpuDevice,
    GpuRequest,
    Node,
    NodePool,
    Quota,
    Tier,
)


@admin.register(Tier)
class TierAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "max_runtime_seconds"]
    filter_horizontal = ["allowed_teams", "allowed_projects"]


class NodeInline(admin.TabularInline):
    model = Node
    extra = 0
    fields = ["name", "gpu_model", "is_schedulable"]


@admin.register(NodePool)
class NodePoolAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "tier",
        "sharing_mode",
        "scheduler_name",
        "placement",
        "scoring",
        "short_reserve_fraction",
        "short_max_runtime_seconds",
    ]
    list_filter = ["sharing_mode", "tier"]
    inlines = [NodeInline]


class GpuDeviceInline(admin.TabularInline):
    model = GpuDevice
    extra = 0


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ["name", "pool", "gpu_model", "is_schedulable", "synced_at"]
    list_filter = ["pool", "is_schedulable"]
    inlines = [GpuDeviceInline]

    def save_model(self, request: HttpRequest, obj: Node, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        dispatch.request_scheduling_cycle()  # more or fewer GPUs: let the queue move


@admin.register(Flavor)
class FlavorAdmin(admin.ModelAdmin):
    list_display = ["name", "pool", "kind", "gpu_model", "gpu_equivalent", "is_active"]
    list_filter = ["kind", "pool"]


@admin.register(Quota)
class QuotaAdmin(admin.ModelAdmin):
    list_display = ["team", "project", "flavor", "guaranteed", "limit"]
    list_filter = ["team", "flavor"]


@admin.register(ApprovalRule)
class ApprovalRuleAdmin(admin.ModelAdmin):
    list_display = [
        "tier",
        "auto_approve_within_guaranteed",
        "auto_approve_max_priority",
        "lead_approves_whole_cards",
        "approval_ttl_hours",
    ]


@admin.register(GpuRequest)
class GpuRequestAdmin(admin.ModelAdmin):
    """Read-only: requests change state only through the lifecycle services."""

    list_display = ["id", "owner", "project", "flavor", "gpu_count", "status", "created_at"]
    list_filter = ["status", "team", "flavor"]

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
