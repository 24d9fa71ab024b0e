"""Reads of the GPU catalogue: the tiers and flavors a project may use, and the largest shapes
a pool's nodes can hold."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, Exists, Max, OuterRef, Q, QuerySet, Sum

from scheduling.choices import FlavorKind
from scheduling.models import Flavor, GpuDevice, Tier
from tenants.models import Project


def tier_allowed_for_project(*, tier: Tier, project: Project) -> bool:
    """A team must be allowed the tier; a project narrows it only if it lists tiers at all."""
    project_links = Tier.allowed_projects.through.objects.filter(project_id=project.pk)
    return (
        Tier.objects.filter(pk=tier.pk, allowed_teams=project.team_id)
        .filter(~Exists(project_links) | Exists(project_links.filter(tier_id=OuterRef("pk"))))
        .exists()
    )


def flavors_for_project(*, project: Project) -> QuerySet[Flavor]:
    """Active flavors in tiers the project may use and for which its team has a quota."""
    flavors = Flavor.objects.filter(
        is_active=True,
        pool__tier__allowed_teams=project.team,
        quotas__team=project.team,
        quotas__project__isnull=True,
    ).select_related("pool", "pool__tier")
    project_tiers = Tier.objects.filter(allowed_projects=project)
    if project_tiers.exists():
        flavors = flavors.filter(pool__tier__in=project_tiers)
    return flavors.distinct()


@dataclass(frozen=True, slots=True)
class PoolCapacity:
    """The largest shapes the pool's schedulable nodes can hold, for request validation."""

    max_gpus_per_node: int
    total_gpus: int
    max_device_memory_mib: int
    mig_slices_total: dict[str, int]
    mig_slices_per_node_max: dict[str, int]
    # The most CPU and memory one node offers; None when a node does not report it (then it
    # does not limit placement) or the pool has no nodes.
    max_node_cpu_millicores: int | None = None
    max_node_memory_mib: int | None = None


def pool_capacity(*, flavor: Flavor) -> PoolCapacity:
    """Counted in the database, one row back whatever the pool's size.

    Only MIG flavors read the devices' slice layouts, which are JSON and summed here.
    """
    devices = GpuDevice.objects.filter(
        node__pool=flavor.pool_id, node__is_schedulable=True, node__gpu_model=flavor.gpu_model
    )
    per_node = devices.values("node_id").annotate(
        gpus=Count("id"),
        node_memory=Max("memory_mib"),
        host_cpu=Max("node__cpu_millicores"),
        host_memory=Max("node__memory_mib"),
    )
    shape = per_node.aggregate(
        busiest=Max("gpus"),
        total=Sum("gpus"),
        memory=Max("node_memory"),
        cpu=Max("host_cpu"),
        max_host_memory=Max("host_memory"),
        cpu_unknown=Count("node_id", filter=Q(host_cpu__isnull=True)),
        memory_unknown=Count("node_id", filter=Q(host_memory__isnull=True)),
    )
    busiest, total, memory = shape["busiest"], shape["total"], shape["memory"]
    mig_total: dict[str, int] = {}
    mig_node: dict[tuple[int, str], int] = {}
    if flavor.kind == FlavorKind.MIG:
        for node_id, layout in devices.values_list("node_id", "mig_layout"):
            for profile, count in (layout or {}).items():
                mig_total[profile] = mig_total.get(profile, 0) + int(count)
                mig_node[(node_id, profile)] = mig_node.get((node_id, profile), 0) + int(count)
    mig_node_max: dict[str, int] = {}
    for (_, profile), count in mig_node.items():
        mig_node_max[profile] = max(mig_node_max.get(profile, 0), count)
    return PoolCapacity(
        max_node_cpu_millicores=None if shape["cpu_unknown"] else shape["cpu"],
        max_node_memory_mib=None if shape["memory_unknown"] else shape["max_host_memory"],
        max_gpus_per_node=int(busiest or 0),
        total_gpus=int(total or 0),
        max_device_memory_mib=int(memory or 0),
        mig_slices_total=mig_total,
        mig_slices_per_node_max=mig_node_max,
    )
