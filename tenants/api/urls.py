from __future__ import annotations

from django.urls import path
from rest_framework.routers import SimpleRouter

from tenants.api import views

router = SimpleRouter()
router.register("teams", views.TeamViewSet, basename="team")
router.register("projects", views.ProjectViewSet, basename="project")
router.register("members", views.MembershipViewSet, basename="membership")
router.register("audit", views.AuditEventViewSet, basename="audit-event")
router.register("notifications", views.NotificationViewSet, basename="notification")
router.register("webhooks", views.WebhookViewSet, basename="webhook")

urlpatterns = [
    path("auth/token/", views.TokenView.as_view(), name="auth-token"),
    path("auth/logout/", views.LogoutView.as_view(), name="auth-logout"),
    path("auth/logout-all/", views.LogoutAllView.as_view(), name="auth-logout-all"),
    path("me/", views.MeView.as_view(), name="me"),
    path(
        "me/notification-settings/",
        views.NotificationSettingsView.as_view(),
        name="notification-settings",
    ),
    *router.urls,
]
