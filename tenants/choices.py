"""Roles of the organisation."""

from __future__ import annotations

from django.db import models


class Role(models.TextChoices):
    DEVELOPER = "developer", "Developer"
    TEAM_LEAD = "team_lead", "Team lead"
    FINANCE = "finance", "Finance"
    PLATFORM_ADMIN = "platform_admin", "Platform admin"


TEAM_ROLES = frozenset({Role.DEVELOPER, Role.TEAM_LEAD})
ORGANISATION_ROLES = frozenset({Role.FINANCE, Role.PLATFORM_ADMIN})


class NotificationKind(models.TextChoices):
    """What an in-app notification is about, for its badge and for filtering."""

    APPROVAL = "approval", "Approval"
    WARNING = "warning", "Warning"
    BUDGET = "budget", "Budget alert"
    UPDATE = "update", "Request update"


class WebhookFormat(models.TextChoices):
    """The payload a webhook's receiver expects."""

    JSON = "json", "Plain JSON"
    SLACK = "slack", "Slack (incoming webhook)"
    TEAMS = "teams", "Microsoft Teams (workflow, Adaptive Card)"


class NotificationTopic(models.TextChoices):
    """What a notice is about, as a user chooses which ones reach them and on which channel."""

    APPROVAL_NEEDED = "approval_needed", "A request needs my decision"
    DECIDED = "decided", "My request was approved, rejected or expired"
    STARTED = "started", "My work started"
    FINISHED = "finished", "My work finished or failed"
    PREEMPTED = "preempted", "My work was preempted"
    RECLAIMED = "reclaimed", "Idle or time-limit warning, or my work was reclaimed"
    BUDGET = "budget", "Budget alert"
    OTHER = "other", "Other updates on my requests"


class NotificationChannel(models.TextChoices):
    """Where a notice reaches its recipient."""

    IN_APP = "in_app", "In the portal"
    EMAIL = "email", "Email"
    WEBHOOK = "webhook", "My webhook (Slack, Teams or JSON)"
