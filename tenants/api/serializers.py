from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django.contrib.auth import authenticate, get_user_model
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from tenants.api.base import (
    FixedOnceCreatedMixin,
    JsonCharField,
    JsonIntegerField,
    ScopedPrimaryKeyRelatedField,
)
from tenants.choices import NotificationTopic, Role
from tenants.models import (
    ALWAYS_IN_APP_TOPICS,
    FAIR_SHARE_WEIGHT_MAX,
    AuditEvent,
    Membership,
    Notification,
    NotificationSettings,
    Project,
    Team,
    Webhook,
)


class TeamSerializer(serializers.ModelSerializer):
    class Meta:
        model = Team
        fields = ["id", "name", "slug", "description", "created_at"]
        read_only_fields = ["id", "created_at"]


class ProjectSerializer(serializers.ModelSerializer):
    team = ScopedPrimaryKeyRelatedField(queryset=Team.objects.all())
    namespace = JsonCharField(read_only=True)

    class Meta:
        model = Project
        fields = ["id", "team", "name", "slug", "description", "namespace", "created_at"]
        read_only_fields = ["id", "created_at"]
        # Uniqueness within the team is checked by the database constraint's message.
        validators: list[Any] = []

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        team = attrs.get("team", getattr(self.instance, "team", None))
        slug = attrs.get("slug", getattr(self.instance, "slug", None))
        clash = Project.objects.filter(team=team, slug=slug)
        if self.instance is not None:
            clash = clash.exclude(pk=self.instance.pk)
        if clash.exists():
            raise serializers.ValidationError(
                {"slug": "A project with this slug exists in the team."}
            )
        return attrs


class TextSlugRelatedField(serializers.SlugRelatedField):
    """A reference by name that refuses NUL characters (PostgreSQL cannot compare them: a 500)."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, str) and "\x00" in data:
            self.fail("does_not_exist", slug_name=self.slug_field, value=data.replace("\x00", ""))
        return super().to_internal_value(data)


WEIGHT_RANGE = f"The fair-share weight is a whole number from 1 to {FAIR_SHARE_WEIGHT_MAX}."


class MembershipSerializer(FixedOnceCreatedMixin, serializers.ModelSerializer):
    user = TextSlugRelatedField(
        slug_field="username", queryset=get_user_model().objects.filter(is_active=True)
    )
    team = ScopedPrimaryKeyRelatedField(
        queryset=Team.objects.all(), allow_null=True, required=False, default=None
    )
    role = serializers.ChoiceField(choices=Role.choices)
    fair_share_weight = JsonIntegerField(
        min_value=1,
        max_value=FAIR_SHARE_WEIGHT_MAX,
        required=False,
        error_messages=dict.fromkeys(("invalid", "min_value", "max_value"), WEIGHT_RANGE),
        help_text=(
            "The member's weight in the fair share inside the team, a whole number from 1 to "
            f"{FAIR_SHARE_WEIGHT_MAX} (default 1): a member of weight 3 gets three times the "
            "cards of a member of weight 1 when both have work waiting. Team memberships only."
        ),
    )

    class Meta:
        model = Membership
        fields = ["id", "user", "team", "role", "fair_share_weight", "created_at"]
        read_only_fields = ["id", "created_at"]
        validators: list[Any] = []

    fixed_once_created = ("user", "team")  # who and where; the role and the weight change


class TokenRequestSerializer(serializers.Serializer):
    username = JsonCharField()
    password = JsonCharField(style={"input_type": "password"}, trim_whitespace=False)
    name = JsonCharField(
        required=False,
        allow_blank=True,
        max_length=64,
        help_text=(
            "The token's name, e.g. the client and machine. Signing in again with the same "
            'name replaces that token (default "API sign-in"), so tokens do not pile up.'
        ),
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        user = authenticate(
            request=self.context.get("request"),
            username=attrs["username"],
            password=attrs["password"],
        )
        if user is None:
            raise serializers.ValidationError("Unable to sign in with these credentials.")
        attrs["user"] = user
        return attrs


class TokenSerializer(serializers.Serializer):
    token = JsonCharField()
    name = JsonCharField()
    expiry = serializers.DateTimeField(allow_null=True)
    replaced = serializers.IntegerField(help_text="Earlier tokens of this name now revoked.")


class RoleSerializer(serializers.Serializer):
    role = JsonCharField()
    team = serializers.DictField(allow_null=True)


class MeSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    username = JsonCharField()
    email = JsonCharField(help_text="The user's address; empty when none is set.")
    full_name = JsonCharField()
    primary_role = JsonCharField(allow_null=True)
    roles = RoleSerializer(many=True)


class AuditEventSerializer(serializers.ModelSerializer):
    actor = JsonCharField(
        source="actor.username", read_only=True, default=None, allow_null=True
    )  # null: a decision the system took by itself

    class Meta:
        model = AuditEvent
        fields = [
            "id",
            "occurred_at",
            "actor",
            "action",
            "target_type",
            "target_id",
            "team",
            "project",
            "message",
            "data",
        ]
        read_only_fields = fields


class NotificationSerializer(serializers.ModelSerializer):
    kind_label = JsonCharField(source="get_kind_display", read_only=True)
    is_read = serializers.SerializerMethodField()

    class Meta:
        model = Notification
        fields = [
            "id",
            "kind",
            "kind_label",
            "event_type",
            "subject",
            "body",
            "url",
            "created_at",
            "read_at",
            "is_read",
        ]
        read_only_fields = fields

    def get_is_read(self, notification: Notification) -> bool:
        return notification.read_at is not None


class NotificationsMarkedSerializer(serializers.Serializer):
    marked_read = serializers.IntegerField(help_text="How many unread notifications were marked.")


def topic_list(help_text: str) -> serializers.ListField:
    return serializers.ListField(
        child=serializers.ChoiceField(choices=NotificationTopic.choices),
        allow_empty=True,
        help_text=help_text,
    )


class NotificationTopicSerializer(serializers.Serializer):
    """One topic a user may switch on or off per channel (for the schema)."""

    topic = serializers.ChoiceField(choices=NotificationTopic.choices)
    description = serializers.CharField()
    always_in_app = serializers.BooleanField()


class NotificationSettingsSerializer(serializers.ModelSerializer):
    """The caller's own notification settings: the topics each channel carries.

    Topics: approval_needed, decided, started, finished, preempted, reclaimed, budget, other.
    `approval_needed` always reaches the portal's inbox; email goes to the account's address
    when `email_enabled`; the webhook gets a POST (in `webhook_format`) when `webhook_url` is set:
    https to a public address only. `topics` lists every topic with its description, in the settings
    page's order (read-only), so that a client shows the ones switched off everywhere too."""

    in_app_topics = topic_list("Topics shown in the portal's inbox.")
    email_topics = topic_list("Topics sent by email, when email is enabled.")
    webhook_topics = topic_list("Topics POSTed to webhook_url, when one is set.")
    webhook_url = JsonCharField(
        max_length=500,
        allow_blank=True,
        required=False,
        help_text="Your webhook (https, a public address); empty: none.",
    )
    email = serializers.SerializerMethodField(help_text="Where email goes: your account's.")
    topics = serializers.SerializerMethodField(
        help_text="Every topic: its name, what it is about, whether it always reaches the inbox."
    )
    updated_at = serializers.DateTimeField(
        read_only=True, allow_null=True, help_text="When last saved; null: never (the defaults)."
    )

    class Meta:
        model = NotificationSettings
        fields = [
            "in_app_topics",
            "email_enabled",
            "email",
            "email_topics",
            "webhook_url",
            "webhook_format",
            "webhook_topics",
            "webhook_last_sent_at",
            "webhook_last_result",
            "topics",
            "updated_at",
        ]
        read_only_fields = ["webhook_last_sent_at", "webhook_last_result", "updated_at"]

    def get_email(self, row: NotificationSettings) -> str:
        return str(getattr(row.user, "email", "") or "")

    @extend_schema_field(NotificationTopicSerializer(many=True))
    def get_topics(self, row: NotificationSettings) -> list[dict[str, Any]]:
        return [
            {
                "topic": value,
                "description": str(label),
                "always_in_app": value in ALWAYS_IN_APP_TOPICS,
            }
            for value, label in NotificationTopic.choices
        ]


class WebhookSerializer(serializers.ModelSerializer):
    """A webhook as platform admins see it; `url` goes in only (Slack's and Teams' carry their
    secret in it), `host` says where it points."""

    url = serializers.URLField(
        write_only=True,
        max_length=500,
        help_text="Where notices are POSTed (http or https). Never returned.",
    )
    host = serializers.SerializerMethodField()

    class Meta:
        model = Webhook
        fields = ["id", "name", "url", "host", "payload_format", "is_active", "created_at"]
        read_only_fields = ["id", "host", "created_at"]

    def get_host(self, webhook: Webhook) -> str:
        return urlsplit(webhook.url).hostname or ""
