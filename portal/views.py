"""The UI shell: each role's home page and the personal API tokens page."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import LoginView
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_POST
from django_htmx.middleware import HtmxDetails
from knox.models import AuthToken

from accounting.selectors.dashboards import dashboard_context
from scheduling.selectors.notebooks import running_servers
from tenants.models import Membership, Project, Team, scope_of
from tenants.selectors import primary_role
from tenants.services.organisation import record_audit_event
from tenants.services.tokens import issue_api_token


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


HOME_TEMPLATES = {
    "developer": "portal/home_developer.html",
    "team_lead": "portal/home_team_lead.html",
    "finance": "portal/home_finance.html",
    "platform_admin": "portal/home_platform_admin.html",
}


@login_required
def home(request: HttpRequest) -> HttpResponse:
    role = primary_role(user=request.user)
    context = {
        "teams": Team.objects.visible_to(request.user),
        "projects": Project.objects.visible_to(request.user).select_related("team"),
        "members": Membership.objects.visible_to(request.user).select_related("user", "team"),
        "scope": scope_of(request.user),
    }
    context.update(dashboard_context(user=request.user, role=role))
    if role == "developer":
        context["running_servers"] = running_servers(user=request.user)
    template = HOME_TEMPLATES.get(role or "", "portal/home_no_role.html")
    return render(request, template, context)


@login_required
def api_tokens(request: HtmxHttpRequest) -> HttpResponse:
    """List the user's tokens; POST creates one and shows it once (HTMX swaps the panel in)."""
    new_token = new_name = None
    replaced = 0
    if request.method == "POST":
        instance, new_token, replaced = issue_api_token(
            user=request.user, name=request.POST.get("name", "") or "Personal token"
        )
        new_name = instance.label.name
        record_audit_event(
            actor=request.user,
            action="auth.token_created",
            target=request.user,
            data={"name": new_name, "replaced": replaced},
        )
    context = {
        "tokens": _tokens_of(request.user),
        "new_token": new_token,
        "new_name": new_name,
        "replaced": replaced,
    }
    template = "portal/_tokens.html" if request.htmx else "portal/tokens.html"
    return render(request, template, context)


def _tokens_of(user: Any) -> Any:
    return AuthToken.objects.filter(user=user).select_related("label").order_by("-created")


@login_required
@require_POST
def revoke_api_token(request: HttpRequest, token_key: str) -> HttpResponse:
    get_object_or_404(AuthToken, token_key=token_key, user=request.user).delete()
    record_audit_event(actor=request.user, action="auth.token_revoked", target=request.user)
    return render(
        request, "portal/_tokens.html", {"tokens": _tokens_of(request.user), "new_token": None}
    )


class ThrottledLoginView(LoginView):
    """Django's login, refusing a flood of attempts from one address (429 with Retry-After)."""

    redirect_authenticated_user = True

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        """The page offers single sign-on when it is on."""
        return super().get_context_data(**kwargs) | {"oidc_enabled": settings.OIDC_ENABLED}

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        key = f"login-attempts:{request.META.get('REMOTE_ADDR', '')}"
        cache.add(key, 0, timeout=60)
        attempts = cache.incr(key)
        if attempts > settings.LOGIN_ATTEMPTS_PER_MINUTE:
            record_audit_event(
                actor=None,
                action="auth.login_throttled",
                target=request.user,
                message=request.META.get("REMOTE_ADDR", ""),
            )
            response = render(request, "registration/throttled.html", status=429)
            response["Retry-After"] = "60"
            return response
        return super().post(request, *args, **kwargs)
