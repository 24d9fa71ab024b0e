"""The simulated cluster: the embedded default backend, a fleet held in the database.

Work starts after a short delay; a job runs for a drawn time (scaled by SIMULATION_SPEED,
sometimes past the request's max runtime) and fails now and then, while notebooks and services
run until the portal stops them. Every workload reports a
GPU utilisation — some of it idle, so reclamation can be seen. Draws are seeded by the
workload's name, so the same launch always behaves the same way and a retried launch cannot
change its fate.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Collection, Iterator, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from runtime.cluster.names import gang_member_name
from runtime.cluster.reports import (
    ClusterEvent,
    LogLine,
    NodeInventory,
    WorkloadPhase,
    WorkloadStatus,
)
from runtime.cluster.specs import (
    RESUMABLE_KINDS,
    PrioritySpec,
    ProjectDataSpec,
    ProjectSpec,
    WorkloadSpec,
)
from runtime.models import SimulatedWorkload
from scheduling.choices import DeviceAllocation
from scheduling.models import GpuDevice, Node

START_DELAY_SECONDS = (5, 20)
BATCH_RUN_SECONDS = (60, 300)
INTERACTIVE_RUN_SECONDS = (180, 600)
FAILURE_RATE = 0.1
IDLE_RATE = 0.25
FAILURE_REASONS = ("Error", "OOMKilled", "ImagePullBackOff")
EXIT_CODES = {"Error": 1, "OOMKilled": 137}
# A simulated container writes one log line this often (in simulated seconds).
LOG_LINE_SECONDS = 5.0
# A reclaimed notebook or service scaled to zero is kept with this marker in `failure_reason`
# and the moment it was scaled down in `ends_at` (the simulation has no replica count to keep).
SCALED_TO_ZERO = "ScaledToZero"


def pod_name(workload: SimulatedWorkload) -> str:
    """The name the Job or ReplicaSet controller would give the workload's pod."""
    digest = hashlib.sha256(f"{workload.namespace}/{workload.name}".encode()).hexdigest()
    return f"{workload.name}-{digest[:5]}"


def _log_text(workload: SimulatedWorkload, index: int) -> str:
    """Line `index` of a simulated container, shaped like what such work prints."""
    draw = random.Random(f"{workload.name}/{index}")
    if workload.kind == "notebook":
        if index == 0:
            return f"[I ServerApp] Jupyter Server is running at: http://{pod_name(workload)}:8888/"
        return draw.choice(
            (
                "[I ServerApp] Kernel started: python3",
                "[I ServerApp] Saving file at /workspace/analysis.ipynb",
                "[I ServerApp] Kernel restarted",
                f"[I ServerApp] 200 GET /api/kernels ({draw.randint(1, 20)} ms)",
            )
        )
    if workload.kind == "service":
        if index == 0:
            return "INFO:     Uvicorn running on http://0.0.0.0:8080 (Press CTRL+C to quit)"
        return (
            f'INFO:     10.128.0.{draw.randint(2, 250)} - "POST /v1/completions HTTP/1.1" 200 OK'
            f" ({draw.randint(40, 900)} ms)"
        )
    loss = 2.5 * 0.97**index + draw.uniform(0, 0.05)
    return (
        f"step {index * 50:>6}  loss {loss:.4f}  lr 3.0e-04  "
        f"throughput {draw.randint(900, 1400)} samples/s"
    )


def _last_words(status: WorkloadStatus) -> str:
    if status.phase == "succeeded":
        return "training finished; checkpoint written to /workspace/checkpoints/final.pt"
    if status.reason == "OOMKilled":
        return "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    if status.reason == "DeadlineExceeded":
        return "Terminated: the job reached its max runtime"
    return f"Traceback (most recent call last): ... RuntimeError: {status.reason or 'error'}"


class SimulatedCluster:
    """A `ClusterBackend` whose state is a function of launch time and the clock."""

    def __init__(self, *, speed: float | None = None) -> None:
        self.speed = max(0.001, speed if speed is not None else settings.SIMULATION_SPEED)

    def sync_inventory(self) -> list[NodeInventory]:
        inventory = []
        nodes = Node.objects.select_related("pool").prefetch_related("devices").order_by("name")
        for node in nodes:
            devices: list[GpuDevice] = list(node.devices.all())
            mig: dict[str, int] = {}
            for device in devices:
                for profile, count in device.mig_layout.items():
                    mig[profile] = mig.get(profile, 0) + int(count)
            # A DRA pool's cards are published as ResourceSlice devices, not nvidia.com/gpu.
            dra = node.pool.allocation == DeviceAllocation.DRA
            allocatable = {} if dra else {"nvidia.com/gpu": str(len(devices))}
            allocatable.update({f"nvidia.com/mig-{p}": str(c) for p, c in mig.items()})
            # Host resources as the node row says (the demo fleet's are real servers' sizes).
            if node.cpu_millicores:
                allocatable["cpu"] = f"{node.cpu_millicores}m"
            if node.memory_mib:
                allocatable["memory"] = f"{node.memory_mib}Mi"
            inventory.append(
                NodeInventory(
                    name=node.name,
                    labels=node.labels,
                    taints=(),
                    ready=True,
                    schedulable=node.is_schedulable,
                    allocatable=allocatable,
                    capacity=allocatable,
                    gpu_model=node.gpu_model,
                    gpu_count=len(devices),
                    gpu_memory_mib=max((d.memory_mib for d in devices), default=None),
                    mig_devices=mig,
                    # The simulated cluster is its own MIG manager: it knows each card's layout.
                    mig_layouts=tuple(dict(d.mig_layout) for d in devices) if mig else None,
                    dra_gpu_count=len(devices) if dra else 0,
                    cpu_millicores=node.cpu_millicores or 0,
                    memory_mib=node.memory_mib or 0,
                )
            )
        return inventory

    def ensure_priority_classes(self, specs: Sequence[PrioritySpec]) -> None:
        """Nothing to create: the simulation has no API objects besides workloads."""

    def ensure_project(self, spec: ProjectSpec) -> None:
        """Nothing to create: namespaces exist implicitly in the simulation."""

    def ensure_project_data(self, spec: ProjectDataSpec) -> None:
        """Nothing to create: the simulation keeps no volumes or secrets."""

    def remove_project_data(self, namespace: str, kind: str, names: Sequence[str]) -> None:
        """Nothing to delete: see `ensure_project_data`."""

    def launch(self, spec: WorkloadSpec) -> str:
        if spec.kind in RESUMABLE_KINDS:
            resumed = self.resume(spec)
            if resumed is not None:
                return resumed
        first = gang_member_name(spec.name, 0) if spec.gang else spec.name
        if SimulatedWorkload.objects.filter(namespace=spec.namespace, name=first).exists():
            return spec.name  # a repeated launch adopts the workload it made before
        if settings.SIMULATED_LAUNCH_DELAY_SECONDS:
            time.sleep(settings.SIMULATED_LAUNCH_DELAY_SECONDS)
        draw = random.Random(hashlib.sha256(spec.name.encode()).digest())
        now = timezone.now()
        delay = draw.uniform(*START_DELAY_SECONDS) / self.speed
        low, high = BATCH_RUN_SECONDS if spec.kind == "job" else INTERACTIVE_RUN_SECONDS
        # Not capped by the max runtime: overrunning work is what the timeout rule stops.
        run = draw.uniform(low, high) / self.speed
        fails = spec.kind == "job" and draw.random() < FAILURE_RATE
        idle = draw.random() < IDLE_RATE
        reason = draw.choice(FAILURE_REASONS) if fails else ""
        utilisation = draw.randint(0, 3) if idle else draw.randint(55, 98)
        # A gang is one workload per rank, on the rank's node; they start and end together,
        # and when the work fails, one rank fails (the portal then stops the whole gang).
        ranks = [(spec.name, spec.node_name)]
        if spec.gang:
            ranks = [
                (gang_member_name(spec.name, rank), member.node_name)
                for rank, member in enumerate(spec.gang)
            ]
        failing = draw.randrange(len(ranks))
        try:
            with transaction.atomic():
                for rank, (name, node_name) in enumerate(ranks):
                    SimulatedWorkload.objects.create(
                        namespace=spec.namespace,
                        name=name,
                        request_key=spec.request_id,
                        attempt=spec.attempt,
                        kind=spec.kind,
                        team_slug=spec.team_slug,
                        project_slug=spec.project_slug,
                        node_name=node_name or "",
                        created_at=now,
                        starts_at=now + timedelta(seconds=delay),
                        ends_at=now + timedelta(seconds=delay + run),
                        # A Job's deadline: its max runtime from when it starts running.
                        deadline_at=now + timedelta(seconds=delay + spec.max_runtime_seconds)
                        if spec.kind == "job" and spec.max_runtime_seconds
                        else None,
                        fails=fails and rank == failing,
                        failure_reason=reason if rank == failing else "",
                        utilisation_percent=utilisation,
                    )
        except IntegrityError:
            pass  # launched concurrently by a duplicate task: the other one's object stands
        return spec.name

    def give_notice(self, namespace: str, request_id: str, attempt: int, *, deadline: str) -> int:
        """A simulated pod has no files to read: how many would have been told."""
        return SimulatedWorkload.objects.filter(
            namespace=namespace, request_key=request_id, attempt=attempt
        ).count()

    def terminate(
        self,
        namespace: str,
        request_id: str,
        attempt: int,
        *,
        reason: str,
        grace_seconds: int = 30,
    ) -> None:
        SimulatedWorkload.objects.filter(
            namespace=namespace, request_key=request_id, attempt=attempt
        ).delete()

    def set_deadline(
        self,
        namespace: str,
        request_id: str,
        attempt: int,
        *,
        max_runtime_seconds: int,
        running_since: datetime | None = None,
    ) -> None:
        """Move a job's deadline (each rank of a gang) to the new max runtime from when it
        started running (`running_since`, else its own start)."""
        for workload in SimulatedWorkload.objects.filter(
            namespace=namespace, request_key=request_id, attempt=attempt, kind="job"
        ):
            start = running_since or workload.starts_at
            deadline = start + timedelta(seconds=max_runtime_seconds)
            SimulatedWorkload.objects.filter(pk=workload.pk).update(deadline_at=deadline)

    def scale_to_zero(self, namespace: str, request_id: str, attempt: int, *, reason: str) -> bool:
        """Notebooks and services stop running but are kept, marked; jobs are deleted."""
        workload = SimulatedWorkload.objects.filter(
            namespace=namespace, request_key=request_id, attempt=attempt
        ).first()
        if workload is None or workload.kind not in RESUMABLE_KINDS:
            self.terminate(namespace, request_id, attempt, reason=reason)
            return False
        SimulatedWorkload.objects.filter(pk=workload.pk).exclude(
            failure_reason=SCALED_TO_ZERO
        ).update(failure_reason=SCALED_TO_ZERO, fails=False, ends_at=timezone.now())
        return True

    def resume(self, spec: WorkloadSpec) -> str | None:
        """Take over the newest scaled-to-zero workload of an earlier attempt: it starts again
        after the usual delay, on the node `spec` names, and runs for a fresh draw."""
        taken_over = SimulatedWorkload.objects.filter(
            namespace=spec.namespace, request_key=spec.request_id, attempt=spec.attempt
        ).first()
        if taken_over is not None:
            return None if taken_over.name == spec.name else taken_over.name
        workload = (
            SimulatedWorkload.objects.filter(
                namespace=spec.namespace,
                request_key=spec.request_id,
                attempt__lt=spec.attempt,
                failure_reason=SCALED_TO_ZERO,
            )
            .order_by("-attempt")
            .first()
        )
        if workload is None:
            return None
        draw = random.Random(hashlib.sha256(f"{spec.name}/resumed".encode()).digest())
        now = timezone.now()
        delay = draw.uniform(*START_DELAY_SECONDS) / self.speed
        run = draw.uniform(*INTERACTIVE_RUN_SECONDS) / self.speed
        SimulatedWorkload.objects.filter(pk=workload.pk, failure_reason=SCALED_TO_ZERO).update(
            attempt=spec.attempt,
            node_name=spec.node_name or "",
            starts_at=now + timedelta(seconds=delay),
            ends_at=now + timedelta(seconds=delay + run),
            failure_reason="",
        )
        return workload.name

    def get_workload(self, namespace: str, request_id: str, attempt: int) -> WorkloadStatus:
        workloads = list(
            SimulatedWorkload.objects.filter(
                namespace=namespace, request_key=request_id, attempt=attempt
            ).order_by("name")
        )
        if len(workloads) > 1:
            return self._gang_status(workloads)
        workload = workloads[0] if workloads else None
        if workload is None:
            return WorkloadStatus(
                request_id=request_id,
                attempt=attempt,
                phase="missing",
                namespace=namespace,
                name="",
                message="No such workload in the simulated cluster.",
            )
        return self._status(workload)

    def list_workloads(
        self,
        namespaces: Sequence[str] | None = None,
        *,
        request_ids: Collection[str] | None = None,
    ) -> list[WorkloadStatus]:
        workloads = SimulatedWorkload.objects.order_by("created_at", "name")
        if namespaces is not None:
            workloads = workloads.filter(namespace__in=list(namespaces))
        if request_ids is not None:
            workloads = workloads.filter(request_key__in=list(request_ids))
        groups: dict[tuple[str, str, int], list[SimulatedWorkload]] = {}
        for workload in workloads:
            key = (workload.namespace, workload.request_key, workload.attempt)
            groups.setdefault(key, []).append(workload)
        return [
            self._gang_status(group) if len(group) > 1 else self._status(group[0])
            for group in groups.values()
        ]

    def _gang_status(self, workloads: list[SimulatedWorkload]) -> WorkloadStatus:
        """One status for the ranks of a gang: a failed rank fails it, rank 0 speaks otherwise."""
        ranks = sorted(workloads, key=lambda w: int(w.name.rpartition("-r")[2] or 0))
        statuses = [self._status(w) for w in ranks]
        first = statuses[0]
        gang = replace(
            first,
            name=first.name.rpartition("-r")[0],
            gang_size=len(statuses),
            node_names=tuple(s.node_name or "" for s in statuses),
        )
        for rank, status in enumerate(statuses):
            if status.phase == "failed":
                return replace(
                    gang,
                    phase="failed",
                    reason=status.reason,
                    message=f"rank {rank} on {status.node_name}: {status.message}",
                    finished_at=status.finished_at,
                )
        return gang

    def utilisation_percent(self, namespace: str, request_id: str, attempt: int) -> int | None:
        """GPU activity of a running workload, as a metrics source would report it."""
        workload = SimulatedWorkload.objects.filter(
            namespace=namespace, request_key=request_id, attempt=attempt
        ).first()
        if workload is None or self._status(workload).phase != "running":
            return None
        return workload.utilisation_percent

    def _status(self, workload: SimulatedWorkload) -> WorkloadStatus:
        now = timezone.now()
        phase: WorkloadPhase
        reason = message = ""
        finished_at = suspended_at = None
        if workload.failure_reason == SCALED_TO_ZERO:
            phase, reason, message = "suspended", SCALED_TO_ZERO, "Scaled to zero by reclamation."
            suspended_at = workload.ends_at
        elif workload.deadline_at is not None and workload.deadline_at <= min(
            now, workload.ends_at
        ):
            # The Job controller stops work at its deadline, whether it ran or still waited.
            phase, reason = "failed", "DeadlineExceeded"
            message = "Job was active longer than specified deadline"
            finished_at = workload.deadline_at
        elif now < workload.starts_at:
            phase, reason, message = "pending", "ContainerCreating", "Pulling the image."
        elif now < workload.ends_at or workload.kind in RESUMABLE_KINDS:
            # Only jobs end by themselves; notebooks and services run until the portal stops
            # them (cancel, reclaim, timeout), as a Deployment would.
            phase = "running"
        elif workload.fails:
            phase, reason = "failed", workload.failure_reason
            message = f"The container exited: {workload.failure_reason}."
            finished_at = workload.ends_at
        else:
            phase, finished_at = "succeeded", workload.ends_at
        exit_code = None
        if phase == "succeeded":
            exit_code = 0
        elif phase == "failed":
            exit_code = EXIT_CODES.get(reason)
        return WorkloadStatus(
            request_id=workload.request_key,
            attempt=workload.attempt,
            phase=phase,
            namespace=workload.namespace,
            name=workload.name,
            kind=workload.kind,  # type: ignore[arg-type]
            reason=reason,
            message=message,
            node_name=workload.node_name or None,
            started_at=workload.starts_at if phase not in ("pending", "suspended") else None,
            finished_at=finished_at,
            team_slug=workload.team_slug,
            project_slug=workload.project_slug,
            suspended_at=suspended_at,
            pod_names=() if phase == "suspended" else (pod_name(workload),),
            exit_code=exit_code,
        )

    # Logs and events -------------------------------------------------------------------------

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
        """Lines written as a function of the clock: one every LOG_LINE_SECONDS of simulated
        time from the start, shaped by the kind (training steps, Jupyter, an HTTP server)."""
        workloads = list(self._attempt_workloads(namespace, request_id, attempt))
        lines = sorted(
            (line for w in workloads for line in self._log_lines(w, tail=tail, since=since)),
            key=lambda line: (line.at or timezone.now(), line.pod),
        )
        yield from lines[-tail:] if tail else lines
        last = lines[-1].at if lines else since
        while follow and any(self._status(w).phase in ("pending", "running") for w in workloads):
            time.sleep(min(1.0, LOG_LINE_SECONDS / self.speed))
            workloads = list(self._attempt_workloads(namespace, request_id, attempt))
            fresh = sorted(
                (line for w in workloads for line in self._log_lines(w, tail=0, since=last)),
                key=lambda line: (line.at or timezone.now(), line.pod),
            )
            yield from fresh
            last = fresh[-1].at if fresh else last

    def list_events(self, namespace: str, request_id: str, attempt: int) -> list[ClusterEvent]:
        now = timezone.now()
        events: list[ClusterEvent] = []
        for workload in self._attempt_workloads(namespace, request_id, attempt):
            events.extend(e for e in self._events(workload) if e.at is not None and e.at <= now)
        return sorted(events, key=lambda e: (e.at or now, e.object_name))

    def _attempt_workloads(
        self, namespace: str, request_id: str, attempt: int
    ) -> list[SimulatedWorkload]:
        return list(
            SimulatedWorkload.objects.filter(
                namespace=namespace, request_key=request_id, attempt=attempt
            ).order_by("name")
        )

    def _log_lines(
        self, workload: SimulatedWorkload, *, tail: int, since: datetime | None
    ) -> list[LogLine]:
        status = self._status(workload)
        if status.phase in ("pending", "suspended") or status.started_at is None:
            return []
        step = timedelta(seconds=LOG_LINE_SECONDS / self.speed)
        end = status.finished_at or timezone.now()
        count = int((end - workload.starts_at) / step) + 1
        first = max(0, count - tail) if tail else 0
        if since is not None:
            first = max(first, int((since - workload.starts_at) / step) + 1)
        pod = pod_name(workload)
        lines = [
            LogLine(pod=pod, text=_log_text(workload, i), at=workload.starts_at + i * step)
            for i in range(first, count)
        ]
        if status.phase in ("succeeded", "failed") and (since is None or end > since):
            lines.append(LogLine(pod=pod, text=_last_words(status), at=end))
        return lines

    def _events(self, workload: SimulatedWorkload) -> list[ClusterEvent]:
        status = self._status(workload)
        pod = pod_name(workload)
        owner = "Job" if workload.kind == "job" else "ReplicaSet"
        start = workload.starts_at
        events = [
            ClusterEvent(
                workload.created_at,
                "Normal",
                "SuccessfulCreate",
                f"Created pod: {pod}",
                owner,
                workload.name,
            ),
            ClusterEvent(
                workload.created_at,
                "Normal",
                "Scheduled",
                f"Successfully assigned {workload.namespace}/{pod} to "
                f"{workload.node_name or 'a node'}",
                "Pod",
                pod,
            ),
            ClusterEvent(workload.created_at, "Normal", "Pulling", "Pulling image", "Pod", pod),
            ClusterEvent(start, "Normal", "Pulled", "Successfully pulled image", "Pod", pod),
            ClusterEvent(start, "Normal", "Created", "Created container: main", "Pod", pod),
            ClusterEvent(start, "Normal", "Started", "Started container main", "Pod", pod),
        ]
        if status.phase == "succeeded":
            events.append(
                ClusterEvent(
                    status.finished_at, "Normal", "Completed", "Job completed", "Job", workload.name
                )
            )
        elif status.phase == "failed":
            events.append(
                ClusterEvent(
                    status.finished_at,
                    "Warning",
                    status.reason or "Failed",
                    status.message,
                    "Job",
                    workload.name,
                )
            )
        elif status.phase == "suspended":
            events.append(
                ClusterEvent(
                    status.suspended_at,
                    "Normal",
                    "ScalingReplicaSet",
                    f"Scaled down replica set {workload.name} to 0",
                    "Deployment",
                    workload.name,
                )
            )
        return events
