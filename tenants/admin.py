"""The Django admin shows the portal's data to staff and changes none of it.

Every write goes through the portal's pages and API, whose services check the role and record an
audit event; the admin would bypass both. Each app's admin classes build on `ReadOnlyAdmin`.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from tenants.models import AuditEvent, Membership, Project, Team


class ReadOnlyAdmin(admin.ModelAdmin):
    """Lists and detail pages only: no add, change or delete, whatever the user's permissions."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyInline(admin.TabularInline):
    """Related rows shown on a parent's page, read-only like the parent."""

    extra = 0

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Team)
class TeamAdmin(ReadOnlyAdmin):
    list_display = ["name", "slug", "created_at"]


@admin.register(Project)
class ProjectAdmin(ReadOnlyAdmin):
    list_display = ["name", "team", "slug"]
    list_filter = ["team"]


@admin.register(Membership)
class MembershipAdmin(ReadOnlyAdmin):
    list_display = ["user", "team", "role"]
    list_filter = ["role", "team"]


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ["occurred_at", "actor", "action", "target_type", "target_id", "team"]
    list_filter = ["action", "team"]
