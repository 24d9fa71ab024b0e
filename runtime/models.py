"""What the runtime keeps of its own: the simulated cluster's workloads, task failure counts and
what was made ready on each cluster.

Requests, allocations, reclaim policies and utilisation samples belong to `scheduling`: the
cycle and the request pages read them, and they sit on the floor below this app.
"""

from __future__ import annotations

from django.db import models


class SimulatedWorkload(models.Model):
    """A workload in the simulated cluster: it starts after a delay, runs, and ends by itself.

    Times are real timestamps computed from the request and SIMULATION_SPEED at launch, so the
    simulation needs no ticking process: its state is a function of the clock.
    """

    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=63)
    request_key = models.CharField(max_length=40)
    attempt = models.PositiveIntegerField()
    kind = models.CharField(max_length=10)
    team_slug = models.CharField(max_length=63)
    project_slug = models.CharField(max_length=63)
    node_name = models.CharField(max_length=253, blank=True)
    created_at = models.DateTimeField()
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    # A job's activeDeadlineSeconds, as a moment: past it, unfinished work fails DeadlineExceeded.
    deadline_at = models.DateTimeField(null=True, blank=True)
    fails = models.BooleanField(default=False)
    failure_reason = models.CharField(max_length=60, blank=True)
    utilisation_percent = models.PositiveSmallIntegerField(default=80)

    class Meta:
        ordering = ["created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["namespace", "name"],
                name="simulated_workload_name_unique",
                violation_error_message="A workload with this name already exists here.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class TaskFailureCount(models.Model):
    """How often a Celery task failed for good; workers count here, /metrics reads it."""

    task_name = models.CharField(max_length=200, unique=True)
    failures = models.PositiveIntegerField(default=0)
    last_failed_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)

    def __str__(self) -> str:
        return f"{self.task_name}: {self.failures}"


class EnsuredObject(models.Model):
    """Cluster objects made ready before launches need them (priority classes, a project's
    namespace and data), with the fingerprint of the spec they were made from and when."""

    cluster = models.CharField(max_length=40)  # "local" or "cluster-<id>"
    key = models.CharField(max_length=300)  # "priority-classes", "project:<namespace>", …
    digest = models.CharField(max_length=64)
    ensured_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "key"],
                name="ensured_object_one_per_cluster_and_key",
                violation_error_message="This object is already recorded for the cluster.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.cluster}: {self.key}"
