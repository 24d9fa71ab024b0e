"""GPU requests, and the saved templates that fill in a request's body."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import F, Q

from scheduling.choices import Priority, RequestStatus, WorkloadKind
from scheduling.models.catalog import Cluster, Flavor
from tenants.models import Project, ScopedQuerySet, Team
from tenants.scope import Scope


class GpuRequestQuerySet(ScopedQuerySet):
    """Requests, scoped to who may see them."""

    def for_scope(self, scope: Scope) -> GpuRequestQuerySet:
        """Developers see their own requests, leads their team's, admins all; finance none."""
        if scope.is_platform_admin:
            return self.all()
        return self.filter(Q(team_id__in=scope.lead_team_ids) | Q(owner_id=scope.user_id)).filter(
            team_id__in=scope.team_ids
        )


class GpuRequest(models.Model):
    """One ask for GPUs by a developer, followed through its lifecycle (see choices.TRANSITIONS)."""

    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="gpu_requests")
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="gpu_requests")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="gpu_requests"
    )
    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="gpu_requests")
    name = models.CharField(
        max_length=80, blank=True, help_text="A short label shown in lists; optional."
    )
    gpu_count = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    gpu_memory_mib = models.PositiveIntegerField(null=True, blank=True)
    gpu_cores_percent = models.PositiveSmallIntegerField(null=True, blank=True)
    kind = models.CharField(max_length=10, choices=WorkloadKind.choices, default=WorkloadKind.JOB)
    image = models.CharField(max_length=255)
    command = models.JSONField(default=list, blank=True)
    env = models.JSONField(default=dict, blank=True)
    max_runtime_seconds = models.PositiveIntegerField()
    priority = models.CharField(max_length=10, choices=Priority.choices, default=Priority.NORMAL)
    is_preemptible = models.BooleanField(default=False)
    allow_shared_node = models.BooleanField(default=True)
    # Host resources, resolved at submit (the flavor's defaults fill what was not asked for).
    cpu_millicores = models.PositiveIntegerField(null=True, blank=True)
    memory_mib = models.PositiveIntegerField(null=True, blank=True)
    shm_mib = models.PositiveIntegerField(null=True, blank=True)
    home_volume = models.BooleanField(
        default=False, help_text="Mount the owner's home volume of the project (notebooks)."
    )
    secret_env = models.JSONField(
        default=list,
        blank=True,
        help_text='Variables read from project secrets: [{"name", "secret", "key"}].',
    )
    reason = models.TextField(blank=True)
    gpu_equivalent = models.DecimalField(max_digits=8, decimal_places=4)
    cluster = models.ForeignKey(
        Cluster,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="gpu_requests",
        help_text="Run only on this cluster; empty lets the engine choose among the pools.",
    )

    status = models.CharField(
        max_length=20, choices=RequestStatus.choices, default=RequestStatus.PENDING_APPROVAL
    )
    status_reason = models.TextField(blank=True)
    needs_lead_approval_because = models.TextField(blank=True)
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="approved_gpu_requests",
    )
    decision_comment = models.TextField(blank=True)
    approval_expires_at = models.DateTimeField(null=True, blank=True)
    waiting_reason = models.TextField(blank=True)
    # The kind of wait the last cycle found (the engine's WaitCode: quota, capacity, reservation,
    # reserved, invalid), and when capacity was reserved for it by backfilling, if it was: the
    # request page's estimated start comes from these, so it agrees with the reason.
    waiting_code = models.CharField(max_length=12, blank=True)
    reserved_start_at = models.DateTimeField(null=True, blank=True)
    # When the engine's forward run expects the request to start, and the interval around it
    # (docs/estimates.md); the most binding thing that keeps it waiting (docs/blockers.md).
    estimated_start_at = models.DateTimeField(null=True, blank=True)
    estimate_low_at = models.DateTimeField(null=True, blank=True)
    estimate_high_at = models.DateTimeField(null=True, blank=True)
    blocker = models.JSONField(default=dict, blank=True)
    # A queued request's place in the engine's queue order is derived when read
    # (`scheduling.selectors.queue.fill_queue_positions`): 1 + the queued requests ranked before
    # it. `queue_rank` is a sparse key that a cycle rewrites only for requests that moved
    # relative to the others, so one admission does not shift (and rewrite) every later row.
    # `queue_position` is stored only where the portal does not order the queue: Kueue's place
    # of a request it holds (runtime/services/kueue_admission.py).
    queue_rank = models.BigIntegerField(null=True, blank=True)
    queue_position = models.PositiveIntegerField(null=True, blank=True)
    attempt = models.PositiveIntegerField(default=0)
    idle_warned_at = models.DateTimeField(null=True, blank=True)
    idle_exempt_until = models.DateTimeField(null=True, blank=True)
    timeout_warned_at = models.DateTimeField(null=True, blank=True)
    # Crashed work back in the queue is not admitted before this (its retry backoff).
    retry_not_before = models.DateTimeField(null=True, blank=True)
    # The last preemption: the request it made room for, why, when, and by when its pods had
    # to stop (SIGTERM then, SIGKILL at the deadline; the tier's grace period apart).
    preempted_by = models.ForeignKey(
        "self",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="preemptions",
    )
    preemption_reason = models.TextField(blank=True)
    preempted_at = models.DateTimeField(null=True, blank=True)
    preemption_deadline_at = models.DateTimeField(null=True, blank=True)

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    approved_at = models.DateTimeField(null=True, blank=True)
    queued_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = GpuRequestQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["status", "team"], name="gpu_request_status_team_idx"),
            models.Index(fields=["project", "flavor", "status"], name="gpu_request_usage_idx"),
            # The request list, newest first, for a developer (own) and a lead (team): a page
            # reads 50 index entries instead of sorting every request in scope.
            models.Index(
                "owner", F("created_at").desc(), F("id").desc(), name="gpu_request_owner_newest_idx"
            ),
            models.Index(
                "team", F("created_at").desc(), F("id").desc(), name="gpu_request_team_newest_idx"
            ),
            # A queued request's position: the queued requests ranked before it, counted here.
            models.Index(
                fields=["queue_rank"],
                condition=Q(status="queued"),
                name="gpu_request_queue_rank_idx",
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(gpu_count__gte=1),
                name="gpu_request_count_positive",
                violation_error_message="A request needs at least one GPU.",
            ),
        ]

    def __str__(self) -> str:
        return f"request {self.pk} ({self.flavor} × {self.gpu_count})"

    @property
    def label(self) -> str:
        """How people call the request: its name and number ("resnet sweep 3 (#1025)")."""
        return f"{self.name} (#{self.pk})" if self.name else f"request #{self.pk}"

    def as_audit_data(self) -> dict[str, Any]:
        return {"status": self.status, "flavor": self.flavor_id, "gpu_count": self.gpu_count}


# What a request and a template have in common: the body that a template fills in.
REQUEST_BODY_FIELDS = (
    "flavor",
    "gpu_count",
    "gpu_memory_mib",
    "gpu_cores_percent",
    "kind",
    "image",
    "command",
    "env",
    "max_runtime_seconds",
    "priority",
    "is_preemptible",
    "allow_shared_node",
    "cpu_millicores",
    "memory_mib",
    "shm_mib",
    "home_volume",
    "secret_env",
)


class RequestTemplateQuerySet(ScopedQuerySet):
    """Templates, scoped: one's own and one's teams' shared ones; admins see all."""

    def for_scope(self, scope: Scope) -> RequestTemplateQuerySet:
        if scope.is_platform_admin:
            return self.all()
        return self.filter(team_id__in=scope.team_ids).filter(
            Q(is_shared=True) | Q(owner_id=scope.user_id)
        )


class RequestTemplate(models.Model):
    """A saved request body (like a KubeSpawner profile): a user's own, or a team's shared one.

    A shared template is the team's: its lead (or a platform admin) writes it and every member
    sees it. A personal one is its owner's alone. Choosing one fills the request form; it holds
    no project, which the requester picks.
    """

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="request_templates")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="request_templates"
    )
    is_shared = models.BooleanField(
        default=False, help_text="Shared with the whole team (written by its lead)."
    )
    name = models.CharField(max_length=80)
    description = models.CharField(max_length=255, blank=True)
    flavor = models.ForeignKey(
        Flavor, on_delete=models.SET_NULL, null=True, blank=True, related_name="templates"
    )
    gpu_count = models.PositiveIntegerField(default=1, validators=[MinValueValidator(1)])
    gpu_memory_mib = models.PositiveIntegerField(null=True, blank=True)
    gpu_cores_percent = models.PositiveSmallIntegerField(null=True, blank=True)
    kind = models.CharField(max_length=10, choices=WorkloadKind.choices, default=WorkloadKind.JOB)
    image = models.CharField(max_length=255)
    command = models.JSONField(default=list, blank=True)
    env = models.JSONField(default=dict, blank=True)
    max_runtime_seconds = models.PositiveIntegerField(default=7200)
    priority = models.CharField(max_length=10, choices=Priority.choices, default=Priority.NORMAL)
    is_preemptible = models.BooleanField(default=False)
    allow_shared_node = models.BooleanField(default=True)
    cpu_millicores = models.PositiveIntegerField(null=True, blank=True)
    memory_mib = models.PositiveIntegerField(null=True, blank=True)
    shm_mib = models.PositiveIntegerField(null=True, blank=True)
    home_volume = models.BooleanField(default=False)
    secret_env = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = RequestTemplateQuerySet.as_manager()

    class Meta:
        ordering = ["-is_shared", "name", "id"]
        indexes = [models.Index(fields=["team", "is_shared"], name="request_template_team_idx")]

    def __str__(self) -> str:
        return self.name

    def as_audit_data(self) -> dict[str, Any]:
        return {"team": self.team_id, "is_shared": self.is_shared, "name": self.name}
