"""Who may write through an endpoint, checked before the service checks it again."""

from __future__ import annotations

from typing import Any

from rest_framework import permissions
from rest_framework.request import Request

from tenants.models import scope_of


class PlatformAdminWrites(permissions.BasePermission):
    """Everyone the queryset lets see an object reads it; only platform admins write.

    A create is refused (403) up front. A change or delete is decided on the object, after the
    scoped lookup: an object the caller cannot see stays a 404, one they can see is a 403.
    """

    message = "Only platform admins may change this."

    def has_permission(self, request: Request, view: Any) -> bool:
        if request.method in permissions.SAFE_METHODS or getattr(view, "detail", False):
            return True
        return scope_of(request.user).is_platform_admin

    def has_object_permission(self, request: Request, view: Any, obj: Any) -> bool:
        if request.method in permissions.SAFE_METHODS:
            return True
        return scope_of(request.user).is_platform_admin
