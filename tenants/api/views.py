from __future__ import annotations

from typing import Any, cast

from drf_spectacular.utils import extend_schema
from knox import views as knox_views
from rest_framework import permissions, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer
from rest_framework.throttling import ScopedRateThrottle
from rest_framework.views import APIView

from tenants.api.authentication import NamedTokenAuthentication
from tenants.api.base import ScopedModelViewSet, ScopedReadOnlyViewSet
from tenants.api.filters import (
    AuditEventFilter,
    MembershipFilter,
    NotificationFilter,
    ProjectFilter,
)
from tenants.api.permissions import PlatformAdminWrites
from tenants.api.serializers import (
    AuditEventSerializer,
    MembershipSerializer,
    MeSerializer,
    NotificationSerializer,
    NotificationSettingsSerializer,
    NotificationsMarkedSerializer,
    ProjectSerializer,
    TeamSerializer,
    TokenRequestSerializer,
    TokenSerializer,
    WebhookSerializer,
)
from tenants.models import AuditEvent, Membership, Notification, Project, Team, Webhook, scope_of
from tenants.selectors import notification_settings_of, primary_role, user_roles
from tenants.services import webhooks as webhook_services
from tenants.services.notification_settings import update_notification_settings
from tenants.services.notifications import mark_notifications_read
from tenants.services.organisation import (
    add_membership,
    change_membership,
    create_project,
    create_team,
    delete_project,
    delete_team,
    record_audit_event,
    remove_membership,
    update_project,
    update_team,
)
from tenants.services.tokens import issue_api_token


class TokenView(APIView):
    """Exchange a username and password for a personal API token (hashed at rest, expiring)."""

    authentication_classes: list[Any] = []
    permission_classes = [permissions.AllowAny]
    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "login"

    @extend_schema(request=TokenRequestSerializer, responses={201: TokenSerializer})
    def post(self, request: Request) -> Response:
        serializer = TokenRequestSerializer(data=request.data, context={"request": request})
        serializer.is_valid(raise_exception=True)
        user = serializer.validated_data["user"]
        instance, token, replaced = issue_api_token(
            user=user, name=serializer.validated_data.get("name", "")
        )
        name = instance.label.name
        record_audit_event(
            actor=user,
            action="auth.token_created",
            target=user,
            data={"name": name, "replaced": replaced},
        )
        body = {"token": token, "name": name, "expiry": instance.expiry, "replaced": replaced}
        return Response(TokenSerializer(body).data, status=status.HTTP_201_CREATED)


@extend_schema(request=None, responses={204: None})
class LogoutView(knox_views.LogoutView):
    """Revoke the token this request was made with."""

    authentication_classes = [NamedTokenAuthentication]


@extend_schema(request=None, responses={204: None})
class LogoutAllView(knox_views.LogoutAllView):
    """Revoke every token of the caller."""

    authentication_classes = [NamedTokenAuthentication]


class MeView(APIView):
    """Who the caller is and which roles they hold."""

    @extend_schema(responses=MeSerializer)
    def get(self, request: Request) -> Response:
        user = request.user
        data = {
            "id": user.pk,
            "username": user.get_username(),
            "email": getattr(user, "email", ""),
            "full_name": user.get_full_name() if hasattr(user, "get_full_name") else "",
            "primary_role": primary_role(user=user),
            "roles": user_roles(user=user),
        }
        return Response(MeSerializer(data).data)


class NotificationSettingsView(APIView):
    """The caller's own notification settings; there is no way to name another user's.

    PUT replaces them (webhook_url may be left out to keep it), PATCH changes what it names.
    """

    @extend_schema(responses=NotificationSettingsSerializer)
    def get(self, request: Request) -> Response:
        row = notification_settings_of(user=request.user)
        return Response(NotificationSettingsSerializer(row).data)

    @extend_schema(request=NotificationSettingsSerializer, responses=NotificationSettingsSerializer)
    def put(self, request: Request) -> Response:
        return self._change(request, partial=False)

    @extend_schema(request=NotificationSettingsSerializer, responses=NotificationSettingsSerializer)
    def patch(self, request: Request) -> Response:
        return self._change(request, partial=True)

    def _change(self, request: Request, *, partial: bool) -> Response:
        row = notification_settings_of(user=request.user)
        serializer = NotificationSettingsSerializer(row, data=request.data, partial=partial)
        serializer.is_valid(raise_exception=True)
        row = update_notification_settings(actor=request.user, **serializer.validated_data)
        return Response(NotificationSettingsSerializer(row).data)


class TeamViewSet(ScopedModelViewSet):
    """Teams: everyone sees their own; platform admins create and change them."""

    permission_classes = [permissions.IsAuthenticated, PlatformAdminWrites]
    queryset = Team.objects.all()
    serializer_class = TeamSerializer
    filterset_fields = ["slug"]
    ordering_fields = ["name", "created_at"]

    def perform_create(self, serializer: BaseSerializer) -> None:
        serializer.instance = create_team(actor=self.request.user, **serializer.validated_data)

    def perform_update(self, serializer: BaseSerializer) -> None:
        serializer.instance = update_team(
            actor=self.request.user,
            team=cast(Team, serializer.instance),
            **serializer.validated_data,
        )

    def perform_destroy(self, instance: Team) -> None:
        delete_team(actor=self.request.user, team=instance)


class ProjectViewSet(ScopedModelViewSet):
    """Projects of the caller's teams; the team lead creates and changes them."""

    queryset = Project.objects.select_related("team")
    serializer_class = ProjectSerializer
    filterset_class = ProjectFilter
    ordering_fields = ["name", "created_at"]

    def perform_create(self, serializer: BaseSerializer) -> None:
        serializer.instance = create_project(actor=self.request.user, **serializer.validated_data)

    def perform_update(self, serializer: BaseSerializer) -> None:
        serializer.instance = update_project(
            actor=self.request.user,
            project=cast(Project, serializer.instance),
            **serializer.validated_data,
        )

    def perform_destroy(self, instance: Project) -> None:
        delete_project(actor=self.request.user, project=instance)


class MembershipViewSet(ScopedModelViewSet):
    """Who holds which role; team leads manage their own team's members."""

    queryset = Membership.objects.select_related("user", "team")
    serializer_class = MembershipSerializer
    filterset_class = MembershipFilter
    ordering_fields = ["created_at"]

    def perform_create(self, serializer: BaseSerializer) -> None:
        serializer.instance = add_membership(actor=self.request.user, **serializer.validated_data)

    def perform_update(self, serializer: BaseSerializer) -> None:
        serializer.instance = change_membership(
            actor=self.request.user,
            membership=cast(Membership, serializer.instance),
            **serializer.validated_data,
        )

    def perform_destroy(self, instance: Membership) -> None:
        remove_membership(actor=self.request.user, membership=instance)


class CanReadAuditTrail(permissions.BasePermission):
    """Listing the trail is for platform admins and team leads: anyone else is refused (403).

    Only the list is refused by role; one event by id stays a 404 outside the caller's scope,
    so an id never tells whether it exists.
    """

    def has_permission(self, request: Request, view: Any) -> bool:
        if getattr(view, "action", None) != "list":
            return True
        scope = scope_of(request.user)
        return scope.is_platform_admin or bool(scope.lead_team_ids)


class AuditEventViewSet(ScopedReadOnlyViewSet):
    """The append-only audit trail: admins read all of it, team leads their team's part."""

    permission_classes = [permissions.IsAuthenticated, CanReadAuditTrail]
    queryset = AuditEvent.objects.select_related("actor")
    serializer_class = AuditEventSerializer
    filterset_class = AuditEventFilter


class NotificationViewSet(ScopedReadOnlyViewSet):
    """The caller's own inbox: approvals, warnings and budget alerts; newest first.

    `?unread=true` lists only the unread ones. Another user's notification is a 404.
    """

    queryset = Notification.objects.all()
    serializer_class = NotificationSerializer
    filterset_class = NotificationFilter

    @extend_schema(request=None, responses=NotificationSerializer)
    @action(detail=True, methods=["post"])
    def read(self, request: Request, pk: str | None = None) -> Response:
        """Mark one notification read; marking it again changes nothing."""
        notification = self.get_object()
        mark_notifications_read(user=request.user, ids=[notification.pk])
        notification.refresh_from_db()
        return Response(self.get_serializer(notification).data)

    @extend_schema(request=None, responses=NotificationsMarkedSerializer)
    @action(detail=False, methods=["post"], url_path="read-all")
    def read_all(self, request: Request) -> Response:
        """Mark every unread notification of the caller read."""
        marked = mark_notifications_read(user=request.user)
        return Response(NotificationsMarkedSerializer({"marked_read": marked}).data)


class WebhookViewSet(ScopedModelViewSet):
    """Webhooks that hear every notice, each in its receiver's format (json, slack, teams);
    platform admins only: to anyone else they do not exist."""

    permission_classes = [permissions.IsAuthenticated, PlatformAdminWrites]
    queryset = Webhook.objects.all()
    serializer_class = WebhookSerializer
    filterset_fields = ["payload_format", "is_active"]

    def perform_create(self, serializer: BaseSerializer) -> None:
        serializer.instance = webhook_services.create_webhook(
            actor=self.request.user, **serializer.validated_data
        )

    def perform_update(self, serializer: BaseSerializer) -> None:
        serializer.instance = webhook_services.update_webhook(
            actor=self.request.user,
            webhook=cast(Webhook, serializer.instance),
            **serializer.validated_data,
        )

    def perform_destroy(self, instance: Webhook) -> None:
        webhook_services.delete_webhook(actor=self.request.user, webhook=instance)
