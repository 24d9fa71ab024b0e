"""The Django admin shows the portal's data to staff and changes none of it.

Every write goes through the portal's pages, API and management commands, whose services check
the role and record an audit event; the admin would bypass both. Each app's admin classes build
on `ReadOnlyAdmin`, and the admins that Django and knox register themselves (users, groups, API
tokens) are registered again here on the same base, so no model in the admin can be written.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group
from django.http import HttpRequest
from knox.admin import AuthTokenAdmin
from knox.models import AuthToken

from tenants.models import AuditEvent, Membership, OidcIdentity, Project, Team


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


@admin.register(OidcIdentity)
class OidcIdentityAdmin(ReadOnlyAdmin):
    list_display = ["user", "issuer", "subject", "created_at", "last_login_at"]
    list_filter = ["issuer"]


# Users, groups and API tokens: Django's and knox's own admins (lists, search, filters) with
# every write refused. Accounts change through `manage.py user_account` (tenants.services.accounts)
# and roles through the membership pages (tenants.services.organisation); tokens through the
# tokens page. The portal gives no rights through Django's groups or permissions.
class ReadOnlyUserAdmin(ReadOnlyAdmin, UserAdmin):
    pass


class ReadOnlyGroupAdmin(ReadOnlyAdmin, GroupAdmin):
    pass


class ReadOnlyAuthTokenAdmin(ReadOnlyAdmin, AuthTokenAdmin):
    pass


for model, model_admin in (
    (get_user_model(), ReadOnlyUserAdmin),
    (Group, ReadOnlyGroupAdmin),
    (AuthToken, ReadOnlyAuthTokenAdmin),
):
    if admin.site.is_registered(model):
        admin.site.unregister(model)
    admin.site.register(model, model_admin)
