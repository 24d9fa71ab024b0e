"""What admission grants: the GPUs an attempt of a request holds and their sampled
activity, and the lease that lets one scheduling loop admit at a time."""

from __future__ import annotations

from django.db import models

from scheduling.models.catalog import NodePool
from scheduling.models.requests import GpuRequest
from tenants.models import ScopedQuerySet
from tenants.scope import Scope


class AllocationQuerySet(ScopedQuerySet):
    def for_scope(self, scope: Scope) -> AllocationQuerySet:
        if scope.is_platform_admin:
            return self.all()
        return self.filter(request__team_id__in=scope.team_ids)

    def active(self) -> AllocationQuerySet:
        return self.filter(ended_at__isnull=True)


class Allocation(models.Model):
    """The GPUs one attempt of a request holds, from admission until the work ends or is evicted.

    `claims` lists, per GPU, what the attempt holds: `{"node", "device_index", "whole",
    "memory_mib", "cores_percent", "mig_profile", "mig_start"}`. An empty list means the
    cluster's scheduler places the work inside the pool.
    """

    request = models.ForeignKey(GpuRequest, on_delete=models.CASCADE, related_name="allocations")
    attempt = models.PositiveIntegerField()
    pool = models.ForeignKey(NodePool, on_delete=models.PROTECT, related_name="allocations")
    claims = models.JSONField(default=list, blank=True)
    is_borrowed = models.BooleanField(default=False)
    is_preemptible = models.BooleanField(default=False)
    workload_name = models.CharField(max_length=63, blank=True)
    node_name = models.CharField(max_length=253, blank=True)
    admitted_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True, db_index=True)
    end_reason = models.CharField(max_length=200, blank=True)
    # What workload sync last saw of the attempt's pods: their names, the main container's exit
    # code and the last termination reason ("OOMKilled: container main exited with code 137").
    pod_names = models.JSONField(default=list, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    # The runtime's word for that exit ("OOMKilled", "Error"): with the exit code, how it crashed.
    exit_reason = models.CharField(max_length=60, blank=True)
    termination_reason = models.CharField(max_length=500, blank=True)
    # When sync first saw a container of the attempt unable to pull its image; the request
    # fails IMAGE_PULL_GRACE_SECONDS after it unless the pull succeeds. Cleared once it runs.
    image_pull_failing_since = models.DateTimeField(null=True, blank=True)
    # When the attempt's workload was created in the cluster: a gang whose ranks are not all
    # placed GANG_READY_TIMEOUT_SECONDS after it is stopped and requeued.
    launched_at = models.DateTimeField(null=True, blank=True)

    objects = AllocationQuerySet.as_manager()

    class Meta:
        ordering = ["-admitted_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["request", "attempt"],
                name="allocation_one_per_attempt",
                violation_error_message="This attempt of the request is already allocated.",
            ),
        ]

    def __str__(self) -> str:
        return f"allocation of request {self.request_id} attempt {self.attempt}"


class UtilisationSample(models.Model):
    """GPU activity of one running allocation at one moment, from the metrics source."""

    allocation = models.ForeignKey(Allocation, on_delete=models.CASCADE, related_name="samples")
    sampled_at = models.DateTimeField()
    activity_percent = models.FloatField()
    memory_used_mib = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["allocation", "sampled_at"]
        indexes = [
            models.Index(fields=["allocation", "sampled_at"], name="utilisation_alloc_time_idx")
        ]

    def __str__(self) -> str:
        return f"{self.allocation_id} {self.sampled_at:%H:%M:%S} {self.activity_percent:.0f}%"


class SchedulerLease(models.Model):
    """A named lease that lets exactly one scheduling loop act at a time across all replicas."""

    name = models.CharField(max_length=60, unique=True)
    holder = models.CharField(max_length=120, blank=True)
    expires_at = models.DateTimeField()
    last_cycle_seconds = models.FloatField(default=0.0)

    def __str__(self) -> str:
        return f"{self.name} held by {self.holder or 'nobody'} until {self.expires_at}"
