"""Django's admin site as the portal serves it."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar, cast

from django.contrib.admin import AdminSite
from django.contrib.admin.apps import AdminConfig
from django.http import Http404, HttpRequest

View = TypeVar("View", bound=Callable[..., Any])


class PortalAdminSite(AdminSite):
    """Django's admin, which does not exist (the portal's 404) for a signed-in user who may not
    use it, as every page a role has no use for (docs/security.md). Django would answer its own
    sign-in form ("not authorized") at one URL and a bare 403 at another. A visitor who has not
    signed in is still sent to the sign-in form."""

    def admin_view(self, view: View, cacheable: bool = False) -> View:
        inner = super().admin_view(view, cacheable)

        @wraps(inner)
        def refused_unless_staff(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            self._refuse_signed_in_outsider(request)
            return inner(request, *args, **kwargs)

        return cast(View, refused_unless_staff)

    def login(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        self._refuse_signed_in_outsider(request)
        return super().login(request, extra_context)

    def _refuse_signed_in_outsider(self, request: HttpRequest) -> None:
        if request.user.is_authenticated and not self.has_permission(request):
            raise Http404


class PortalAdminConfig(AdminConfig):
    """Django's admin app, on the portal's site."""

    default_site = "portal.admin_site.PortalAdminSite"
