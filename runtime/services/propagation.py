"""Decisions made after a launch that the cluster must learn: a longer runtime, a new quota.

Each service takes ids, reads the decision as it stands now (so a repeat, or a late task after
a second change, pushes the latest value) and is safe to run twice.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal

from django.conf import settings
from django.db.models import Max, Q

from runtime.cluster.base import ClusterBackend, LimitRangeSpec, ProjectSpec
from runtime.services.ensured import EnsuredObjects
from scheduling.choices import FlavorKind, RequestStatus
from scheduling.models import Allocation, Flavor, GpuDevice, GpuRequest, Quota
from tenants.models import Project

# Containers that state no CPU or memory get these, so one workload cannot starve a node.
PROJECT_LIMIT_RANGE = LimitRangeSpec(
    default_requests={"cpu": "1", "memory": "4Gi"},
    default_limits={"cpu": "8", "memory": "64Gi"},
)
GPU = "nvidia.com/gpu"
GPU_MEMORY = "nvidia.com/gpumem"
GPU_CORES = "nvidia.com/gpucores"


def card_memory_by_pool(pool_ids: Iterable[int]) -> dict[int, int]:
    """The largest card of each pool (what a request's vGPU share is measured against); a
    pool without cards is left out."""
    rows = (
        GpuDevice.objects.filter(node__pool__in=list(pool_ids))
        .values_list("node__pool")
        .annotate(largest=Max("memory_mib"))
        .order_by()
    )
    return {pool_id: int(largest) for pool_id, largest in rows if largest}


def flavor_quota(
    flavor: Flavor, limit: int, *, card_memory: dict[int, int] | None = None
) -> dict[str, int]:
    """The namespace ResourceQuota amounts that `limit` units of `flavor` grant.

    Whole cards: `nvidia.com/gpu`. MIG: `nvidia.com/mig-<profile>`. vGPU: `nvidia.com/gpu`
    (shares), and `gpumem`/`gpucores` as the most any mix of requests within the quota can
    hold: the engine charges a share the flavor's weight for each flavor-sized part it asks
    (memory or cores, whichever is larger; at most 1 for a whole card's worth), so one
    GPU-equivalent buys at most the flavor's memory ÷ its weight (or a card's memory) and its
    cores ÷ its weight (or 100 %). So the cluster never refuses what the engine admits.
    """
    if flavor.kind == FlavorKind.MIG:
        return {f"requests.nvidia.com/mig-{flavor.mig_profile}": limit}
    if flavor.kind != FlavorKind.VGPU:
        return {f"requests.{GPU}": limit}
    weight = Decimal(flavor.gpu_equivalent)
    equivalents = Decimal(limit) * weight
    if card_memory is None:  # read here: the largest card of the flavor's pool
        card_memory = card_memory_by_pool([flavor.pool_id])
    card_memory_mib = card_memory.get(flavor.pool_id, flavor.gpu_memory_mib)
    memory_per_equivalent = max(Decimal(flavor.gpu_memory_mib) / weight, Decimal(card_memory_mib))
    cores_per_equivalent = max(Decimal(flavor.gpu_cores_percent) / weight, Decimal(100))
    return {
        f"requests.{GPU}": limit,
        f"requests.{GPU_MEMORY}": int(equivalents * memory_per_equivalent),
        f"requests.{GPU_CORES}": int(equivalents * cores_per_equivalent),
    }


def project_spec(project: Project) -> ProjectSpec:
    """The project's namespace with a ResourceQuota mirroring every GPU resource its quotas
    grant: its own split of a flavor where it has one, else the team's quota of it."""
    quota: dict[str, int] = {}
    rows = Quota.objects.filter(
        Q(project__isnull=True) | Q(project=project), team=project.team_id
    ).select_related("flavor")
    own = {q.flavor_id for q in rows if q.project_id == project.pk}
    vgpu_pools = {q.flavor.pool_id for q in rows if q.flavor.kind == FlavorKind.VGPU}
    card_memory = card_memory_by_pool(vgpu_pools) if vgpu_pools else {}
    for row in rows:
        if row.project_id is None and row.flavor_id in own:
            continue  # the project's own split is tighter than the team's
        for key, amount in flavor_quota(row.flavor, row.limit, card_memory=card_memory).items():
            quota[key] = quota.get(key, 0) + amount
    return ProjectSpec(
        team_slug=project.team.slug,
        project_slug=project.slug,
        namespace=project.namespace,
        quota=quota,
        limit_range=PROJECT_LIMIT_RANGE,
        ingress_namespace=settings.INGRESS_CONTROLLER_NAMESPACE,
    )


def push_project_quotas(
    *, project_ids: Iterable[int], backend: ClusterBackend, ensured: EnsuredObjects | None = None
) -> int:
    """Converge each project's namespace and ResourceQuota on its quotas as they are now (and
    record it in `ensured`, so launches need not); returns how many projects were pushed."""
    projects = Project.objects.filter(pk__in=list(project_ids)).select_related("team")
    pushed = 0
    for project in projects.order_by("pk"):
        spec = project_spec(project)
        backend.ensure_project(spec)
        if ensured is not None:
            ensured.record(f"project:{spec.namespace}", spec)
        pushed += 1
    return pushed


def affected_projects(*, team_id: int, project_id: int | None) -> list[int]:
    """The projects whose namespace quota a change of this quota row moves: the project's
    own, or, for a team's quota, every project of the team."""
    if project_id is not None:
        return [project_id]
    return list(Project.objects.filter(team_id=team_id).values_list("pk", flat=True))


def set_request_deadline(*, request_id: int, attempt: int, backend: ClusterBackend) -> bool:
    """Patch the live attempt's deadline to the request's max runtime, counted from when its
    pod started running (the allocation's `started_at`, once sync saw it run); False when the
    attempt is no longer live (finished, preempted or relaunched meanwhile)."""
    request = GpuRequest.objects.select_related("project").get(pk=request_id)
    if request.attempt != attempt or request.status not in (
        RequestStatus.LAUNCHING,
        RequestStatus.RUNNING,
    ):
        return False
    running_since = (
        Allocation.objects.filter(request=request, attempt=attempt)
        .values_list("started_at", flat=True)
        .first()
    )
    backend.set_deadline(
        request.project.namespace,
        str(request.pk),
        attempt,
        max_runtime_seconds=request.max_runtime_seconds,
        running_since=running_since,
    )
    return True
