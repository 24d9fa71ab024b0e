"""Turning admitted requests into workloads and the cluster's news back into request states.

The cluster is the truth for what runs; the database for what was asked and decided. Every
service here takes ids, is safe to run twice, and changes request states only through
`lifecycle.transition()`.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Collection
from datetime import timedelta
from functools import lru_cache
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.db.models import Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from runtime.cluster.base import (
    ClusterBackend,
    ClusterError,
    GangMember,
    PermanentClusterError,
    PrioritySpec,
    ProjectSpec,
    Toleration,
    WatchableClusterBackend,
    WorkloadSpec,
    WorkloadStatus,
)
from runtime.cluster.base import Taint as ClusterTaint
from runtime.cluster.kueue_objects import LOCAL_QUEUE_NAME
from runtime.selectors.workloads import LIVE_STATUSES, live_requests_on
from runtime.services import project_data, propagation, verdicts
from runtime.services.connect import workload_notebook_token, workload_route
from runtime.services.ensured import EnsuredObjects, ensured_objects
from runtime.services.inventory import gpu_products
from runtime.services.kueue_admission import sync_kueue
from runtime.services.observed import record_observation
from runtime.services.relocation import relocated_claims
from scheduling import dispatch
from scheduling.choices import SHARING_MODE_OF_FLAVOR_KIND, DeviceAllocation, RequestStatus
from scheduling.models import Allocation, Cluster, GpuRequest, NodePool, ReclaimPolicy
from scheduling.sealing import SealError, unseal
from scheduling.services.lifecycle import end_allocation, record_request_event, transition
from scheduling.services.notifications import announce_finish, announce_start

log = logging.getLogger(__name__)

# All `Never`: the portal alone preempts (see PrioritySpec); the value still orders the pods
# kube-scheduler places.
PRIORITY_CLASSES = {
    "low": PrioritySpec("gpu-portal-low", 100, description="GPU Portal: low priority"),
    "normal": PrioritySpec("gpu-portal-normal", 1000, description="GPU Portal: normal"),
    "high": PrioritySpec("gpu-portal-high", 10000, description="GPU Portal: high"),
    "critical": PrioritySpec("gpu-portal-critical", 100000, description="GPU Portal: critical"),
}


@lru_cache(maxsize=1)
def cluster_backend() -> ClusterBackend:
    """The backend CLUSTER_BACKEND names; built once per process."""
    if settings.CLUSTER_BACKEND == "kubernetes":
        from runtime.cluster.kubernetes import KubernetesClusterBackend

        return KubernetesClusterBackend(
            kubeconfig=settings.KUBECONFIG or None,
            context=settings.KUBE_CONTEXT,
            portal_username=settings.KUBERNETES_PORTAL_USERNAME or None,
        )
    from runtime.cluster.simulated import SimulatedCluster

    return SimulatedCluster()


def backend_for(cluster: Cluster | None) -> ClusterBackend:
    """The backend of `cluster`: the local one (`cluster_backend`) or, for a registered
    cluster, a Kubernetes backend built from its sealed kubeconfig."""
    if cluster is None or cluster.is_local:
        return cluster_backend()
    return _registered_backend(cluster.pk, cluster.kubeconfig_sealed)


# Keyed by the sealed text too, so a replaced kubeconfig builds a new client.
@lru_cache(maxsize=32)
def _registered_backend(cluster_id: int, kubeconfig_sealed: str) -> ClusterBackend:
    from runtime.cluster.kubernetes import (
        KubernetesClusterBackend,
        api_client_from_kubeconfig_text,
    )

    try:
        kubeconfig = unseal(kubeconfig_sealed)["kubeconfig"]
    except (SealError, KeyError) as exc:
        raise PermanentClusterError(f"cluster {cluster_id}: {exc}") from exc
    return KubernetesClusterBackend(api_client=api_client_from_kubeconfig_text(kubeconfig))


def attempt_cluster(request_id: int, attempt: int) -> Cluster | None:
    """The cluster an attempt was placed on (its allocation's pool's), None before placement."""
    allocation = (
        Allocation.objects.filter(request_id=request_id, attempt=attempt)
        .select_related("pool__cluster")
        .order_by("-pk")
        .first()
    )
    return allocation.pool.cluster if allocation else None


def attempt_backend(request_id: int, attempt: int) -> ClusterBackend:
    """The backend of the cluster the attempt runs (or ran) on."""
    return backend_for(attempt_cluster(request_id, attempt))


def project_spec(request: GpuRequest) -> ProjectSpec:
    """The request's project namespace and the ResourceQuota mirroring its quotas."""
    return propagation.project_spec(request.project)


def gang_members(request: GpuRequest, allocation: Allocation) -> tuple[GangMember, ...]:
    """A whole-card job the engine spread over several nodes runs as one pod per node, each
    with that node's cards (the same count on every node), held to those nodes when the portal
    places."""
    nodes = [name for name in allocation.node_name.split(",") if name]
    sharing = SHARING_MODE_OF_FLAVOR_KIND[request.flavor.kind]
    if len(nodes) < 2 or request.kind != "job" or sharing != "exclusive":
        return ()
    cards = Counter(claim["node"] for claim in allocation.claims)
    if set(cards) != set(nodes):
        return ()
    pinned = allocation.pool.placement == "portal"
    return tuple(GangMember(node_name=n if pinned else None, gpu_count=cards[n]) for n in nodes)


def start_allowance_seconds(pool: NodePool) -> int:
    """How long launched work may wait for a node: its tier's `pending_timeout_seconds`, after
    which the reclaim pass calls it stuck."""
    try:
        policy = pool.tier.reclaim_policy  # read with the pool by the launch path
    except ReclaimPolicy.DoesNotExist:
        policy = ReclaimPolicy()
    return int(policy.pending_timeout_seconds)


def workload_spec(
    request: GpuRequest, allocation: Allocation, data: project_data.RequestData | None = None
) -> WorkloadSpec:
    """What the cluster is asked to run for the allocated attempt; `data` is the request's
    project data when the caller read it already."""
    if data is None:
        data = project_data.request_data(request)
    flavor = request.flavor
    pool = allocation.pool  # the flavor's pool, or the one of its other pools the engine chose
    sharing = SHARING_MODE_OF_FLAVOR_KIND[flavor.kind]
    nodes = [name for name in allocation.node_name.split(",") if name]
    placed_by_portal = pool.placement == "portal" and len(nodes) == 1
    gang = gang_members(request, allocation)
    dra = pool.allocation == DeviceAllocation.DRA and sharing == "exclusive"
    return WorkloadSpec(
        request_id=str(request.pk),
        attempt=allocation.attempt,
        team_slug=request.team.slug,
        project_slug=request.project.slug,
        namespace=request.project.namespace,
        kind=request.kind,  # type: ignore[arg-type]
        image=request.image,
        sharing=sharing,  # type: ignore[arg-type]
        gpu_count=request.gpu_count,
        command=tuple(request.command),
        env=request.env,
        vgpu_memory_mib=request.gpu_memory_mib if sharing == "vgpu" else None,
        vgpu_cores_percent=request.gpu_cores_percent if sharing == "vgpu" else None,
        mig_profile=flavor.mig_profile if sharing == "mig" else None,
        scheduler_name=pool.scheduler_name,
        node_selector=pool.node_labels,
        gpu_products=gpu_products(flavor.gpu_model),
        tolerations=tuple(
            Toleration.for_taint(
                ClusterTaint(t["key"], t.get("effect", "NoSchedule"), t.get("value", ""))
            )
            for t in pool.taints
        ),
        node_name=nodes[0] if placed_by_portal else None,
        priority_class_name=PRIORITY_CLASSES[request.priority].name,
        queue_name=LOCAL_QUEUE_NAME if pool.cluster.scheduler_mode == "kueue" else None,
        max_runtime_seconds=request.max_runtime_seconds,
        start_allowance_seconds=start_allowance_seconds(pool),
        owner=request.owner.get_username(),
        reason=request.reason[:200],
        gang=gang,
        # The cards the engine chose, for HAMi to honour (vGPU) or for the ResourceClaim to
        # select (DRA), when the portal placed the pod.
        device_indexes=tuple(c["device_index"] for c in allocation.claims if c["node"] == nodes[0])
        if (sharing == "vgpu" or dra) and placed_by_portal
        else (),
        allocation="dra" if dra else "device-plugin",
        route=workload_route(request),
        notebook_token=workload_notebook_token(request),
        fs_group=settings.WORKLOAD_FS_GROUP,
        run_as_non_root=request.kind in settings.WORKLOAD_NON_ROOT_KINDS,
        termination_grace_seconds=pool.tier.preemption_grace,
        **project_data.workload_fields(request, data),
    )


def _live_allocation(request: GpuRequest, attempt: int) -> Allocation | None:
    return (
        Allocation.objects.active()
        .filter(request=request, attempt=attempt)
        .select_related("pool__cluster", "pool__tier")
        .first()
    )


def ensure_priority_classes(ensured: EnsuredObjects, backend: ClusterBackend) -> None:
    classes = tuple(PRIORITY_CLASSES.values())
    ensured.ensure(
        "priority-classes", classes, lambda: backend.ensure_priority_classes(list(classes))
    )


def _ensure_launch_prerequisites(
    backend: ClusterBackend, ensured: EnsuredObjects, request: GpuRequest
) -> None:
    """The priority classes and the request's project, unless made ready lately
    (`prepare_projects`, or an earlier launch)."""
    ensure_priority_classes(ensured, backend)
    spec = project_spec(request)
    ensured.ensure(f"project:{spec.namespace}", spec, lambda: backend.ensure_project(spec))


def prepare_projects(
    *, project_ids: Collection[int], backend: ClusterBackend, cluster: Cluster | None
) -> int:
    """Make the priority classes and each project's namespace, quota and limit range ready on
    `cluster` when a project or quota is created or changed, so that no launch waits for
    them; returns how many projects were pushed."""
    ensured = ensured_objects(backend, cluster)
    ensure_priority_classes(ensured, backend)
    return propagation.push_project_quotas(
        project_ids=project_ids, backend=backend, ensured=ensured
    )


def _launch_allocation(request_id: int, attempt: int) -> Allocation | None:
    """The attempt's live allocation with its request and all that the workload spec reads
    of both, in one statement."""
    return (
        Allocation.objects.active()
        .filter(request_id=request_id, attempt=attempt)
        .select_related(
            "request__project__team",
            "request__team",
            "request__flavor__pool",
            "request__owner",
            "pool__cluster",
            "pool__tier__reclaim_policy",
        )
        .first()
    )


def launch_request(*, request_id: int, attempt: int, backend: ClusterBackend | None = None) -> str:
    """Create the workload of one admitted attempt on the cluster of its allocation's pool; a
    repeat adopts the same object."""
    allocation = _launch_allocation(request_id, attempt)
    if allocation is None:
        return "stale"  # ended (cancelled, preempted) meanwhile: nothing to do
    request = allocation.request
    if request.attempt != attempt or request.status not in (
        RequestStatus.ADMITTED,
        RequestStatus.LAUNCHING,
    ):
        return "stale"  # cancelled, preempted or relaunched meanwhile
    backend = backend or backend_for(allocation.pool.cluster)
    ensured = ensured_objects(backend, allocation.pool.cluster)
    _ensure_launch_prerequisites(backend, ensured, request)
    data = project_data.request_data(request)
    project_data.ensure_for_launch(request, data, backend, ensured.ensure)
    spec = workload_spec(request, allocation, data)
    transition(request, RequestStatus.LAUNCHING, actor=None, reason="Creating the workload.")
    try:
        name = backend.launch(spec)
    except ClusterError as error:
        # What was ensured may be gone (a deleted or terminating namespace): the next launch
        # ensures it again; a 404 (no such namespace) does so at once and launches again.
        ensured.forget("priority-classes", f"project:{spec.namespace}")
        if error.status != 404:
            raise
        _ensure_launch_prerequisites(backend, ensured, request)
        project_data.ensure_for_launch(request, data, backend)  # a new namespace has none of it
        name = backend.launch(spec)
    # A repeated launch (it adopts the workload) keeps the first launch's time.
    Allocation.objects.filter(pk=allocation.pk).update(
        workload_name=name, launched_at=Coalesce("launched_at", Value(timezone.now()))
    )
    return name


def fail_launch(*, request_id: int, attempt: int, reason: str) -> None:
    """The cluster refused the workload for good: fail the request and free its GPUs."""
    with transaction.atomic():
        request = GpuRequest.objects.get(pk=request_id)
        if request.attempt != attempt:
            return
        if transition(request, RequestStatus.FAILED, actor=None, reason=reason):
            end_allocation(request, reason="launch failed")


def _requeue_gang(request: GpuRequest, reason: str, *, action: str, end_reason: str) -> str:
    """A gang is one piece of work: a rank that failed (or vanished while it ran, or could not
    be placed in time) takes the whole gang down, and the request goes back to the queue with
    its age (the engine orders by submission time), up to its tier's attempts, as preempted
    work does."""
    request = GpuRequest.objects.select_related("flavor__pool").get(pk=request.pk)
    policy = ReclaimPolicy.objects.filter(tier_id=request.flavor.pool.tier_id).first()
    max_attempts = (policy or ReclaimPolicy()).max_attempts
    with transaction.atomic():
        if request.status not in (RequestStatus.ADMITTED, *LIVE_STATUSES):
            return request.status
        allocation = end_allocation(request, reason=end_reason)
        if allocation is not None:
            dispatch.request_termination(request.pk, allocation.attempt, end_reason)
        record_request_event(request, actor=None, action=action, message=reason)
        dispatch.request_scheduling_cycle()
        if request.attempt < max_attempts:
            transition(request, RequestStatus.PREEMPTED, actor=None, reason=reason)
            transition(request, RequestStatus.QUEUED, actor=None, reason=f"Requeued: {reason}")
            return RequestStatus.QUEUED
        transition(
            request,
            RequestStatus.FAILED,
            actor=None,
            reason=f"{reason} — gave up after {request.attempt} attempts.",
        )
        return RequestStatus.FAILED


def gang_not_ready(request: GpuRequest, status: WorkloadStatus) -> str | None:
    """Why a launching gang must be stopped: a rank the cluster's scheduler has not placed on a
    node GANG_READY_TIMEOUT_SECONDS after the launch (kube-scheduler binds each rank on its own,
    so the placed ranks would hold their GPUs for a gang that cannot run). None while it may
    still wait, and for anything but a launching gang of this attempt."""
    timeout = settings.GANG_READY_TIMEOUT_SECONDS
    if (
        timeout <= 0
        or status.gang_size <= 1
        or status.phase != "pending"
        or status.attempt != request.attempt
        or request.status != RequestStatus.LAUNCHING
    ):
        return None
    nodes = (*status.node_names, *([""] * status.gang_size))[: status.gang_size]
    unplaced = [rank for rank, node in enumerate(nodes) if not node]
    if not unplaced:
        return None
    launched = (
        Allocation.objects.active()
        .filter(request=request, attempt=status.attempt)
        .values_list("launched_at", "admitted_at")
        .first()
    )
    since = (launched[0] or launched[1]) if launched else None
    if since is None or timezone.now() < since + timedelta(seconds=timeout):
        return None
    rank = unplaced[0]
    detail = status.message.removeprefix(f"rank {rank}: ").rstrip(". ") or status.reason
    return (
        f"rank {rank} of {status.gang_size} could not be scheduled within {timeout} s: "
        f"{detail}; the gang was stopped and requeued"
    )


def reconcile_placement(request: GpuRequest, status: WorkloadStatus) -> bool:
    """Make the allocation say where the work really runs, as the cluster reports it.

    HAMi may assign other cards than the engine planned (vGPU: `device_indexes`), and in a
    `placement=cluster` pool kube-scheduler picks the node: the claims move there, so capacity
    and lost-node checks follow the real placement. Gangs are pinned node by node and are left
    as planned. Returns True when the allocation changed (an audit event says from what).
    """
    if status.gang_size > 1 or not status.node_name or status.attempt != request.attempt:
        return False
    allocation = _live_allocation(request, request.attempt)
    if allocation is None:
        return False
    claims: list[dict[str, Any]] = list(allocation.claims)
    moved = claims
    if status.device_indexes and len(status.device_indexes) == len(claims):
        moved = [
            {**claim, "node": status.node_name, "device_index": index}
            for claim, index in zip(claims, status.device_indexes, strict=True)
        ]
    elif any(claim["node"] != status.node_name for claim in claims):
        moved = relocated_claims(allocation, status.node_name)
    if moved == claims and allocation.node_name == status.node_name:
        return False
    changed = Allocation.objects.filter(pk=allocation.pk, ended_at__isnull=True).update(
        claims=moved, node_name=status.node_name
    )
    if changed:
        record_request_event(
            request,
            actor=None,
            action="allocation.reconciled",
            message=f"The cluster placed it on {status.node_name}"
            + (f", cards {list(status.device_indexes)}" if status.device_indexes else "")
            + ".",
            data={"from": claims, "to": moved, "node": status.node_name},
        )
    return bool(changed)


def apply_workload_status(request: GpuRequest, status: WorkloadStatus) -> str | None:
    """Map one observed workload onto its request; returns the new status if it moved."""
    record_observation(request, status)  # pods, exit code, termination reason
    settled = verdicts.settle(request, status)  # deadline reached, crash loop
    if settled is not None:
        return settled
    verdicts.record_wait(request, status)
    if status.gang_size > 1 and (
        status.phase == "failed"
        or (status.reason == "GangIncomplete" and request.status == RequestStatus.RUNNING)
    ):
        detail = f"{status.reason}: {status.message}" if status.reason else status.message
        return _requeue_gang(
            request,
            f"A rank of the gang stopped ({detail}); the whole gang was stopped",
            action="gang.member_failed",
            end_reason="gang member failed",
        )
    not_ready = gang_not_ready(request, status)
    if not_ready is not None:
        return _requeue_gang(
            request, not_ready, action="gang.not_ready", end_reason="gang not ready in time"
        )
    if status.phase in ("pending", "running"):
        reconcile_placement(request, status)
    with transaction.atomic():
        if status.phase == "running" and request.status == RequestStatus.LAUNCHING:
            if transition(request, RequestStatus.RUNNING, actor=None, reason="Running."):
                announce_start(request)
            Allocation.objects.active().filter(request=request, started_at__isnull=True).update(
                started_at=status.started_at or timezone.now()
            )
            if request.kind == "job":
                # Its Job's deadline counted from the Job's start: give it the whole max
                # runtime from now on, however long it waited for a node.
                dispatch.request_deadline_change(request.pk, request.attempt)
            return RequestStatus.RUNNING
        if status.phase in ("succeeded", "failed"):
            if request.status == RequestStatus.LAUNCHING and status.started_at:
                Allocation.objects.active().filter(request=request, started_at__isnull=True).update(
                    started_at=status.started_at
                )
            target = (
                RequestStatus.SUCCEEDED if status.phase == "succeeded" else RequestStatus.FAILED
            )
            detail = f"{status.reason}: {status.message}" if status.reason else status.message
            reason = "Finished." if status.phase == "succeeded" else f"Failed — {detail}"
            if transition(request, target, actor=None, reason=reason):
                allocation = end_allocation(request, reason=status.phase)
                if allocation is not None and status.finished_at:
                    Allocation.objects.filter(pk=allocation.pk).update(ended_at=status.finished_at)
                announce_finish(request)
                return target
        if status.phase == "missing" and request.status == RequestStatus.RUNNING:
            reason = "The workload disappeared from the cluster."
            if transition(request, RequestStatus.FAILED, actor=None, reason=reason):
                end_allocation(request, reason="workload missing")
                announce_finish(request)
                return RequestStatus.FAILED
    return None


WorkloadKey = tuple[str, str, int]  # (namespace, request id, attempt)
# The periodic sync (`sync_watched_workloads`): where the last pass left the backend's watch, a
# full pass at least this often (deadlines, Jobs that made no pod), and how long a pass listens.
WATCH_STATE_KEY = "runtime:workload-watch"
FULL_SYNC_SECONDS = 60.0
WATCH_SECONDS = 1


def _workload_key(request: GpuRequest) -> WorkloadKey:
    return (request.project.namespace, str(request.pk), request.attempt)


def sync_workloads(
    *,
    backend: ClusterBackend | None = None,
    only: Collection[WorkloadKey] | None = None,
    cluster: Cluster | None = None,
) -> dict[str, int]:
    """Read every live request's workload (or those of `only`) from the cluster and move
    requests accordingly.

    One labelled list per namespace with live requests (`list_workloads`), not reads per
    request; a request the listing lacks, or whose Job has made no pod yet (its events say
    why), is read on its own (`get_workload`), so the answer is the same as reading each. Of
    `only`, one workload is read on its own; several are listed together, selected by their
    request ids (a burst of launches is one list per kind, not three reads each).
    """
    backend = backend or backend_for(cluster)
    moved: dict[str, int] = {}
    kueue = (cluster.scheduler_mode if cluster else settings.SCHEDULER) == "kueue"
    # Kueue's held Jobs have no pods to report a change: the Kueue pass reads every live one.
    ids = None if only is None or kueue else {int(key[1]) for key in only if key[1].isdigit()}
    live = live_requests_on(cluster, ids=ids)
    if kueue:
        # Requests Kueue holds (or just evicted) have no pods to read (runtime/kueue_admission).
        held = sync_kueue(requests=live, backend=backend)
        live = [request for request in live if request.pk not in held]
    if only is not None:
        live = [request for request in live if _workload_key(request) in only]
    listed: dict[WorkloadKey, WorkloadStatus] = {}
    list_workloads = getattr(backend, "list_workloads", None)
    one_changed = only is not None and len(live) == 1
    if live and list_workloads is not None and not one_changed:
        namespaces = sorted({request.project.namespace for request in live})
        request_ids = None if only is None else [str(request.pk) for request in live]
        listed = {
            (s.namespace, s.request_id, s.attempt): s
            for s in list_workloads(namespaces, request_ids=request_ids)
        }
    for request in live:
        key = _workload_key(request)
        status = listed.get(key)
        if status is None or status.reason == "NoPod":
            status = backend.get_workload(*key)
        new_status = apply_workload_status(request, status)
        if new_status:
            moved[new_status] = moved.get(new_status, 0) + 1
    return moved


def sync_watched_workloads(
    *, backend: ClusterBackend | None = None, cluster: Cluster | None = None
) -> dict[str, int]:
    """The periodic sync: between full passes (`sync_workloads`, every FULL_SYNC_SECONDS) only
    the workloads whose pods changed since the last pass, as the backend's watch reports them
    from the resource version that pass reached (kept in the cache for every worker).

    A backend that cannot watch, an expired version (410: `resync`) or no cache gets a full
    pass. The version is taken before a full pass lists, so nothing that changes meanwhile is
    missed; a change seen twice is read twice, which changes nothing.
    """
    backend = backend or backend_for(cluster)
    if not isinstance(backend, WatchableClusterBackend):
        return sync_workloads(backend=backend, cluster=cluster)
    state_key = f"{WATCH_STATE_KEY}:{cluster.slug}" if cluster else WATCH_STATE_KEY
    state = _cached_watch_state(state_key)
    now = time.time()
    if state is not None and now - state["listed_at"] < FULL_SYNC_SECONDS:
        version, changed = state["version"], set()
        for event in backend.watch_workloads(version, timeout_seconds=WATCH_SECONDS):
            if event.type == "resync":
                break
            version = event.resource_version or version
            if event.type in ("changed", "deleted"):
                changed.add((event.namespace, event.request_id, event.attempt))
        else:
            moved = sync_workloads(backend=backend, only=changed, cluster=cluster)
            _cache_watch_state(state_key, {"version": version, "listed_at": state["listed_at"]})
            return moved
    (start,) = backend.watch_workloads(None)  # a `resync` with the current version
    moved = sync_workloads(backend=backend, cluster=cluster)
    _cache_watch_state(state_key, {"version": start.resource_version, "listed_at": now})
    return moved


def _cached_watch_state(key: str) -> dict[str, Any] | None:
    try:
        state = cache.get(key)
    except Exception:
        log.warning("cache unavailable: a full workload sync", exc_info=True)
        return None
    return state if isinstance(state, dict) else None


def _cache_watch_state(key: str, state: dict[str, Any]) -> None:
    try:
        cache.set(key, state, timeout=int(FULL_SYNC_SECONDS * 2))
    except Exception:
        log.warning("cache unavailable: the next workload sync is a full one", exc_info=True)


def terminate_request_workload(
    *, request_id: int, attempt: int, reason: str, backend: ClusterBackend | None = None
) -> None:
    backend = backend or attempt_backend(request_id, attempt)
    request = GpuRequest.objects.select_related("project__team").get(pk=request_id)
    backend.terminate(request.project.namespace, str(request.pk), attempt, reason=reason)
