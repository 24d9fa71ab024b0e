from __future__ import annotations

from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from portal import health, inbox, views

api_v1 = [
    path("", include("tenants.api.urls")),
    path("", include("scheduling.api.urls")),
    path("", include("runtime.api.urls")),
    path("", include("accounting.api.urls")),
]

urlpatterns = [
    path("", views.home, name="home"),
    path("login/", views.ThrottledLoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("account/tokens/", views.api_tokens, name="api-tokens"),
    path("account/tokens/<str:token_key>/revoke/", views.revoke_api_token, name="api-token-revoke"),
    path("notifications/", inbox.notifications_page, name="notifications-page"),
    path("notifications/<int:pk>/read/", inbox.notification_read, name="notification-read-page"),
    path("notifications/read-all/", inbox.notifications_read_all, name="notifications-read-all"),
    path(
        "notifications/settings/",
        inbox.notification_settings_page,
        name="notification-settings-page",
    ),
    path("", include("scheduling.urls")),
    path("", include("accounting.urls")),
    path("", include("runtime.urls")),
    path("manage/", include("portal.manage_urls")),
    path("api/v1/", include(api_v1)),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    # The split view serves its init script as a file: the CSP allows no inline script. Our
    # template gives the page its language, landmarks and readable colours.
    path(
        "api/docs/",
        SpectacularSwaggerSplitView.as_view(url_name="schema", template_name="api/swagger_ui.html"),
        name="api-docs",
    ),
    path("admin/", admin.site.urls),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", health.metrics, name="metrics"),
]

if settings.OIDC_ENABLED:
    urlpatterns.append(path("oidc/", include("mozilla_django_oidc.urls")))

handler404 = "tenants.api.errors.not_found_view"
handler500 = "tenants.api.errors.server_error_view"
