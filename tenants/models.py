"""The organisation: teams, their projects (the tenant boundary), memberships and the audit trail.

Every query that reaches a user goes through `<Model>.objects.visible_to(user)`; an object outside
that queryset does not exist for the user (the API answers 404).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, URLValidator
from django.db import models
from django.db.models import Q

from tenants.choices import (
    ORGANISATION_ROLES,
    TEAM_ROLES,
    NotificationKind,
    NotificationTopic,
    Role,
    WebhookFormat,
)
from tenants.scope import ANONYMOUS, Actor, Scope
from tenants.validators import validate_webhook_url


class ScopedQuerySet(models.QuerySet):
    """A queryset that knows how to restrict itself to what a user may see."""

    def visible_to(self, user: Any) -> ScopedQuerySet:
        return self.for_scope(scope_of(user))

    def for_scope(self, scope: Scope) -> ScopedQuerySet:
        raise NotImplementedError


class TeamQuerySet(ScopedQuerySet):
    def for_scope(self, scope: Scope) -> TeamQuerySet:
        if scope.sees_all_tenants:
            return self.all()
        return self.filter(id__in=scope.team_ids)


class Team(models.Model):
    """A group of people that shares a GPU quota and a budget."""

    name = models.CharField(max_length=100, unique=True)
    slug = models.SlugField(max_length=40, unique=True)
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TeamQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class ProjectQuerySet(ScopedQuerySet):
    def for_scope(self, scope: Scope) -> ProjectQuerySet:
        if scope.sees_all_tenants:
            return self.all()
        return self.filter(team_id__in=scope.team_ids)


class Project(models.Model):
    """A team's unit of work and the tenant boundary: one Kubernetes namespace, its own quota."""

    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="projects")
    name = models.CharField(max_length=100)
    slug = models.SlugField(max_length=40)
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = ProjectQuerySet.as_manager()

    class Meta:
        ordering = ["team__name", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["team", "slug"],
                name="project_slug_unique_in_team",
                violation_error_message="A project with this slug already exists in the team.",
            ),
        ]

    def __str__(self) -> str:
        """The names people know it by: "Vision / Detection" (its slugs make its namespace)."""
        return f"{self.team.name} / {self.name}"

    @property
    def namespace(self) -> str:
        """The Kubernetes namespace that holds the project's workloads."""
        return f"gpu-{self.team.slug}-{self.slug}"[:63]


class MembershipQuerySet(ScopedQuerySet):
    def for_scope(self, scope: Scope) -> MembershipQuerySet:
        if scope.is_platform_admin:
            return self.all()
        return self.filter(team_id__in=scope.team_ids)


FAIR_SHARE_WEIGHT_MAX = 100


class Membership(models.Model):
    """A user's role: per team (developer, team lead) or for the organisation (finance, admin).

    A team membership also carries the member's weight in the fair share inside the team: the
    queue gives a member of weight 3 three times the cards of a member of weight 1 when both
    wait (scheduling/engine/queue.py).
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    team = models.ForeignKey(
        Team, on_delete=models.CASCADE, related_name="memberships", null=True, blank=True
    )
    role = models.CharField(max_length=20, choices=Role.choices)
    fair_share_weight = models.PositiveSmallIntegerField(
        default=1,
        validators=[MinValueValidator(1), MaxValueValidator(FAIR_SHARE_WEIGHT_MAX)],
        help_text=(
            f"The member's weight in the fair share inside the team (1-{FAIR_SHARE_WEIGHT_MAX}): "
            "a member of weight 3 gets three times the cards of a member of weight 1 when "
            "both have work waiting."
        ),
    )
    created_at = models.DateTimeField(auto_now_add=True)

    objects = MembershipQuerySet.as_manager()

    class Meta:
        ordering = ["team__name", "user__username"]
        constraints = [
            models.UniqueConstraint(
                fields=["user", "team"],
                condition=Q(team__isnull=False),
                name="membership_one_role_per_team",
                violation_error_message="The user is already a member of this team.",
            ),
            models.UniqueConstraint(
                fields=["user", "role"],
                condition=Q(team__isnull=True),
                name="membership_organisation_role_once",
                violation_error_message="The user already has this organisation role.",
            ),
            models.CheckConstraint(
                condition=(
                    Q(team__isnull=False, role__in=sorted(TEAM_ROLES))
                    | Q(team__isnull=True, role__in=sorted(ORGANISATION_ROLES))
                ),
                name="membership_role_matches_team",
                violation_error_message=(
                    "Developer and team lead roles belong to a team; "
                    "finance and platform admin roles to the organisation."
                ),
            ),
            models.CheckConstraint(
                condition=Q(fair_share_weight__gte=1, fair_share_weight__lte=FAIR_SHARE_WEIGHT_MAX),
                name="membership_fair_share_weight_range",
                violation_error_message=(
                    f"The fair-share weight is a whole number from 1 to {FAIR_SHARE_WEIGHT_MAX}."
                ),
            ),
        ]

    def __str__(self) -> str:
        where = self.team.name if self.team else "organisation"
        return f"{self.user} – {self.get_role_display()} ({where})"


def user_of(actor: Actor | None) -> User | None:
    """The signed-in user behind `actor`; None for the system or a visitor."""
    return None if actor is None or isinstance(actor, AnonymousUser) else actor


def scope_of(user: Actor | None) -> Scope:
    """The user's roles, read once per user object and kept on it as `portal_scope`.

    Each request authenticates a fresh user object, so a changed role counts from the next
    request on.
    """
    if user is None or not user.is_authenticated or not user.is_active:
        return ANONYMOUS
    cached = getattr(user, "portal_scope", None)
    if cached is not None:
        return cached
    team_ids: set[int] = set()
    lead_team_ids: set[int] = set()
    is_admin = bool(user.is_superuser)
    is_finance = False
    for role, team_id in Membership.objects.filter(user_id=user.pk).values_list("role", "team_id"):
        if role == Role.PLATFORM_ADMIN:
            is_admin = True
        elif role == Role.FINANCE:
            is_finance = True
        elif team_id is not None:
            team_ids.add(team_id)
            if role == Role.TEAM_LEAD:
                lead_team_ids.add(team_id)
    scope = Scope(user.pk, is_admin, is_finance, frozenset(team_ids), frozenset(lead_team_ids))
    user.portal_scope = scope  # type: ignore[attr-defined]  # memo on this request's user
    return scope


class AuditEventQuerySet(ScopedQuerySet):
    def for_scope(self, scope: Scope) -> AuditEventQuerySet:
        if scope.is_platform_admin:
            return self.all()
        return self.filter(team_id__in=scope.lead_team_ids)


class AuditEvent(models.Model):
    """An append-only record of one decision or one human action."""

    occurred_at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    action = models.CharField(max_length=60, db_index=True)
    target_type = models.CharField(max_length=60)
    target_id = models.CharField(max_length=64, blank=True)
    team = models.ForeignKey(
        Team, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    project = models.ForeignKey(
        Project, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    message = models.TextField(blank=True)
    data = models.JSONField(default=dict, blank=True)

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        ordering = ["-occurred_at", "-id"]
        indexes = [models.Index(fields=["target_type", "target_id"], name="audit_target_idx")]

    def __str__(self) -> str:
        return (
            f"{self.occurred_at:%Y-%m-%d %H:%M} {self.action} {self.target_type}:{self.target_id}"
        )

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None:
            raise ValidationError("Audit events are append-only.")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> Any:
        raise ValidationError("Audit events are append-only.")


class NotificationQuerySet(ScopedQuerySet):
    def for_scope(self, scope: Scope) -> NotificationQuerySet:
        return self.filter(recipient_id=scope.user_id) if scope.user_id else self.none()


class Notification(models.Model):
    """One message in a user's in-app inbox: an approval to give or got, a warning, an alert.

    Only its recipient ever sees it, whatever their roles.
    """

    recipient = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications"
    )
    kind = models.CharField(max_length=20, choices=NotificationKind.choices)
    event_type = models.CharField(max_length=60)
    subject = models.CharField(max_length=200)
    body = models.TextField(blank=True)
    url = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    read_at = models.DateTimeField(null=True, blank=True)

    objects = NotificationQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(
                fields=["recipient"],
                condition=Q(read_at__isnull=True),
                name="notification_unread_idx",
            )
        ]

    def __str__(self) -> str:
        return f"{self.recipient} · {self.subject}"


# What a user hears before they choose: everything in the portal, everything but starts by
# email, everything on a webhook once they name one.
DEFAULT_IN_APP_TOPICS = tuple(NotificationTopic.values)
DEFAULT_EMAIL_TOPICS = tuple(t for t in NotificationTopic.values if t != NotificationTopic.STARTED)
DEFAULT_WEBHOOK_TOPICS = tuple(NotificationTopic.values)
# What needs a lead's decision always reaches their inbox, whatever else they switch off.
ALWAYS_IN_APP_TOPICS = frozenset({NotificationTopic.APPROVAL_NEEDED.value})


def default_in_app_topics() -> list[str]:
    return list(DEFAULT_IN_APP_TOPICS)


def default_email_topics() -> list[str]:
    return list(DEFAULT_EMAIL_TOPICS)


def default_webhook_topics() -> list[str]:
    return list(DEFAULT_WEBHOOK_TOPICS)


class NotificationSettingsQuerySet(ScopedQuerySet):
    def for_scope(self, scope: Scope) -> NotificationSettingsQuerySet:
        # Everyone's settings are their own, whatever their roles: a webhook URL is a secret.
        return self.filter(user_id=scope.user_id) if scope.user_id else self.none()


class NotificationSettings(models.Model):
    """How one user wants to hear what happens: which topics reach them in the portal, by
    email and on a webhook of their own. A user without a row has the defaults."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        primary_key=True,
        related_name="notification_settings",
    )
    in_app_topics = models.JSONField(default=default_in_app_topics, blank=True)
    email_enabled = models.BooleanField(default=True)
    email_topics = models.JSONField(default=default_email_topics, blank=True)
    webhook_url = models.CharField(
        max_length=500,
        blank=True,
        validators=[validate_webhook_url],
        help_text="Where your notices are POSTed (https, a public address); empty: none.",
    )
    webhook_format = models.CharField(
        max_length=10, choices=WebhookFormat.choices, default=WebhookFormat.JSON
    )
    webhook_topics = models.JSONField(default=default_webhook_topics, blank=True)
    webhook_last_sent_at = models.DateTimeField(null=True, blank=True)
    webhook_last_result = models.CharField(max_length=200, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = NotificationSettingsQuerySet.as_manager()

    class Meta:
        verbose_name_plural = "notification settings"

    def __str__(self) -> str:
        return f"Notification settings of {self.user}"

    def clean(self) -> None:
        errors = {}
        for name in ("in_app_topics", "email_topics", "webhook_topics"):
            value = getattr(self, name)
            if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
                errors[name] = "A list of topics."
                continue
            unknown = sorted(set(value) - set(NotificationTopic.values))
            if unknown:
                errors[name] = f"Unknown topics: {', '.join(unknown)}."
            else:
                setattr(self, name, [t for t in NotificationTopic.values if t in value])
        if errors:
            raise ValidationError(errors)
        missing = ALWAYS_IN_APP_TOPICS - set(self.in_app_topics)
        self.in_app_topics = [
            t for t in NotificationTopic.values if t in {*self.in_app_topics, *missing}
        ]


class WebhookQuerySet(ScopedQuerySet):
    def for_scope(self, scope: Scope) -> WebhookQuerySet:
        # A webhook's URL is a credential (Slack's and Teams' carry their secret in the path).
        return self.all() if scope.is_platform_admin else self.none()


class Webhook(models.Model):
    """An HTTP endpoint that hears every notice the portal sends, in its receiver's format.

    Platform admins register them; no one else sees them.
    """

    name = models.CharField(max_length=100, unique=True)
    url = models.URLField(
        max_length=500,
        validators=[URLValidator(schemes=["https", "http"])],
        help_text="Where the notices are POSTed.",
    )
    payload_format = models.CharField(
        max_length=10, choices=WebhookFormat.choices, default=WebhookFormat.JSON
    )
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = WebhookQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class ApiTokenLabel(models.Model):
    """The name a personal API token was given and when it was last used (knox keeps neither)."""

    token = models.OneToOneField(
        "knox.AuthToken", on_delete=models.CASCADE, primary_key=True, related_name="label"
    )
    name = models.CharField(max_length=64)
    last_used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.name


class OidcIdentity(models.Model):
    """Which account a person of the identity provider signs in as: the provider's issuer and
    stable subject (`iss`, `sub` of the ID token), never the username, which people can change
    or name after someone else's account."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="oidc_identities"
    )
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    created_at = models.DateTimeField(auto_now_add=True)
    last_login_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "single sign-on identity"
        constraints = [
            models.UniqueConstraint(
                fields=["issuer", "subject"],
                name="oidc_identity_unique_subject",
                violation_error_message="This identity is already linked to an account.",
            )
        ]

    def __str__(self) -> str:
        return f"{self.issuer} {self.subject}"
