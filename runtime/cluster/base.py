"""The cluster backend interface: the `ClusterBackend` protocol and its errors.

Everything here is plain Python (no Django, no Kubernetes client) so that the Django layer maps
its models onto these values, the simulated backend implements the same protocol, and tests build
specs without a database. The values live by what they are: `names` (labels and object names),
`specs` (what the portal asks for), `reports` (what the cluster says back); this module
re-exports them, so `from runtime.cluster.base import WorkloadSpec` reads as the interface.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

from runtime.cluster.names import (
    ATTEMPT_LABEL,
    GANG_SIZE_LABEL,
    KIND_LABEL,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    MAX_ATTEMPT,
    MAX_RUNTIME_ANNOTATION,
    OWNER_ANNOTATION,
    PROJECT_LABEL,
    RANK_LABEL,
    REASON_ANNOTATION,
    REQUEST_ID_PATTERN,
    REQUEST_LABEL,
    REVISION_ANNOTATION,
    SUSPENDED_AT_ANNOTATION,
    SUSPENDED_REPLICAS_ANNOTATION,
    TEAM_LABEL,
    TERMINATE_REASON_ANNOTATION,
    WORKLOAD_LABEL,
    gang_member_name,
    is_dns_label,
    is_label_value,
    project_namespace,
    workload_name,
)
from runtime.cluster.reports import (
    ClusterEvent,
    HamiDevice,
    LogLine,
    NodeInventory,
    WorkloadEvent,
    WorkloadPhase,
    WorkloadStatus,
)
from runtime.cluster.specs import (
    HOME_MOUNT_PATH,
    RESUMABLE_KINDS,
    SHARING_MODES,
    WORKLOAD_KINDS,
    WORKSPACE_MOUNT_PATH,
    DeviceAllocation,
    GangMember,
    LimitRangeSpec,
    PreemptionPolicy,
    PrioritySpec,
    ProjectDataSpec,
    ProjectSpec,
    RouteKind,
    SecretEnvVar,
    SecretSpec,
    SecretType,
    SharingMode,
    Taint,
    TaintEffect,
    Toleration,
    VolumeAccessMode,
    VolumeClaimSpec,
    VolumeMount,
    WorkloadKind,
    WorkloadRoute,
    WorkloadSpec,
)

__all__ = [
    "ATTEMPT_LABEL",
    "ClusterBackend",
    "ClusterError",
    "ClusterEvent",
    "DeviceAllocation",
    "GANG_SIZE_LABEL",
    "GangMember",
    "HOME_MOUNT_PATH",
    "HamiDevice",
    "KIND_LABEL",
    "LimitRangeSpec",
    "LogLine",
    "MANAGED_BY_LABEL",
    "MANAGED_BY_VALUE",
    "MAX_ATTEMPT",
    "MAX_RUNTIME_ANNOTATION",
    "NodeInventory",
    "OWNER_ANNOTATION",
    "PROJECT_LABEL",
    "PermanentClusterError",
    "PreemptionPolicy",
    "PrioritySpec",
    "ProjectDataSpec",
    "ProjectSpec",
    "RANK_LABEL",
    "REASON_ANNOTATION",
    "REQUEST_ID_PATTERN",
    "REQUEST_LABEL",
    "RESUMABLE_KINDS",
    "REVISION_ANNOTATION",
    "RouteKind",
    "SHARING_MODES",
    "SUSPENDED_AT_ANNOTATION",
    "SUSPENDED_REPLICAS_ANNOTATION",
    "SecretEnvVar",
    "SecretSpec",
    "SecretType",
    "SharingMode",
    "TEAM_LABEL",
    "TERMINATE_REASON_ANNOTATION",
    "Taint",
    "TaintEffect",
    "Toleration",
    "TransientClusterError",
    "VolumeAccessMode",
    "VolumeClaimSpec",
    "VolumeMount",
    "WORKLOAD_KINDS",
    "WORKLOAD_LABEL",
    "WORKSPACE_MOUNT_PATH",
    "WatchableClusterBackend",
    "WorkloadEvent",
    "WorkloadKind",
    "WorkloadPhase",
    "WorkloadRoute",
    "WorkloadSpec",
    "WorkloadStatus",
    "gang_member_name",
    "is_dns_label",
    "is_label_value",
    "project_namespace",
    "workload_name",
]


class ClusterError(Exception):
    """Any failure talking to the cluster. `status` is the HTTP status when there was one."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        reason: str = "",
        retry_after_seconds: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.reason = reason
        self.retry_after_seconds = retry_after_seconds


class TransientClusterError(ClusterError):
    """Worth retrying with backoff: timeouts, refused connections, 429, 5xx, update conflicts."""


class PermanentClusterError(ClusterError):
    """Retrying will not help: invalid objects (422), forbidden (403), a name owned by others."""


class ClusterBackend(Protocol):
    """What the portal needs from a cluster. Every method is safe to call twice.

    Implementations: `kubernetes` (the real API) and `simulated` (the demo fleet). Errors are
    `TransientClusterError` (the Celery layer retries with jittered backoff) or
    `PermanentClusterError`; implementations do not retry by themselves.
    """

    def sync_inventory(self) -> list[NodeInventory]:
        """Every node with its GPUs, labels, taints and allocatable resources."""
        ...

    def ensure_priority_classes(self, specs: Sequence[PrioritySpec]) -> None:
        """Create or converge the portal's PriorityClasses."""
        ...

    def ensure_project(self, spec: ProjectSpec) -> None:
        """Create or adopt the project's namespace, quota and limit range, converging drift."""
        ...

    def ensure_project_data(self, spec: ProjectDataSpec) -> None:
        """Create the project's claims and Secrets, grow a claim asked bigger and replace a
        Secret whose revision is older; a repeat changes nothing."""
        ...

    def remove_project_data(self, namespace: str, kind: str, names: Sequence[str]) -> None:
        """Delete the named PersistentVolumeClaims or Secrets (`kind`); gone is done."""
        ...

    def launch(self, spec: WorkloadSpec) -> str:
        """Create the workload and return its name; a repeat adopts what exists."""
        ...

    def give_notice(self, namespace: str, request_id: str, attempt: int, *, deadline: str) -> int:
        """Tell the attempt's running pods by when (RFC 3339) a preemption kills them, before
        `terminate` sends SIGTERM; returns how many were told. Gone counts as done."""
        ...

    def terminate(
        self,
        namespace: str,
        request_id: str,
        attempt: int,
        *,
        reason: str,
        grace_seconds: int = 30,
    ) -> None:
        """Delete the workload and its pods; already gone counts as success."""
        ...

    def set_deadline(
        self,
        namespace: str,
        request_id: str,
        attempt: int,
        *,
        max_runtime_seconds: int,
        running_since: datetime | None = None,
    ) -> None:
        """Let a workload run `max_runtime_seconds` from `running_since` (when its pod started
        running): a Job's `activeDeadlineSeconds` (every rank of a gang), which the Job
        controller counts from the Job's start, becomes the time the Job waited to run plus
        the max runtime. Without `running_since` the wait allowed at launch is kept. Gone
        counts as done."""
        ...

    def scale_to_zero(self, namespace: str, request_id: str, attempt: int, *, reason: str) -> bool:
        """Reclaim without losing the workload: a notebook or service keeps its Deployment and
        Service at zero replicas (its pods, and so its GPUs, are released) and True is returned;
        anything else (a Job) is terminated and False returned. Repeats keep the replica count
        recorded by the first call."""
        ...

    def resume(self, spec: WorkloadSpec) -> str | None:
        """Take over the scaled-to-zero workload of an earlier attempt of `spec`'s request as
        `spec.attempt`, placed as `spec` says, and scale it back to its recorded replicas.

        Returns the workload's name, or None when there is nothing to resume (the caller then
        launches afresh). `launch` of a notebook or service calls this first; a repeat finds the
        workload already taken over and returns its name again.
        """
        ...

    def get_workload(self, namespace: str, request_id: str, attempt: int) -> WorkloadStatus:
        """The status of one workload, `missing` when nothing of it exists."""
        ...

    def list_workloads(
        self,
        namespaces: Sequence[str] | None = None,
        *,
        request_ids: Collection[str] | None = None,
    ) -> list[WorkloadStatus]:
        """Every workload carrying the portal's labels (all namespaces when `None`), or only
        those of `request_ids`."""
        ...

    def read_logs(
        self,
        namespace: str,
        request_id: str,
        attempt: int,
        *,
        tail: int = 100,
        follow: bool = False,
        since: datetime | None = None,
    ) -> Iterator[LogLine]:
        """The last `tail` lines of every pod of the attempt (only those after `since` when
        given), oldest first; with `follow`, keep yielding new lines until the pods end or the
        caller stops iterating. No pod yet is no lines, not an error."""
        ...

    def list_events(self, namespace: str, request_id: str, attempt: int) -> list[ClusterEvent]:
        """The cluster's events about the attempt's objects (Job, Deployment, pods), oldest
        first."""
        ...


@runtime_checkable
class WatchableClusterBackend(ClusterBackend, Protocol):
    """A backend that can also stream changes instead of being polled."""

    def watch_workloads(
        self, resource_version: str | None = None, *, timeout_seconds: int = 300
    ) -> Iterator[WorkloadEvent]:
        """Yield changes after `resource_version`; yields `resync` and carries on after 410."""
        ...
