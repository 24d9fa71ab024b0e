"""The scheduling app's models, one module per sub-domain; every name is imported from here.

- `catalog`: tiers, clusters, node pools, nodes, GPU devices and flavors, with each tier's
  approval rule and reclaim policy.
- `quotas`: a team's quota of a flavor and its projects' parts of it.
- `requests`: GPU requests and request templates.
- `allocations`: the GPUs an admitted attempt holds, their utilisation samples, and the
  scheduler's lease.
- `project_data`: storage quotas, project workspaces, home volumes and project secrets.
"""

from scheduling.models.allocations import (
    Allocation,
    AllocationQuerySet,
    SchedulerLease,
    UtilisationSample,
)
from scheduling.models.catalog import (
    LOCAL_CLUSTER_SLUG,
    MIG_SLICES_PER_GPU,
    POOL_LABEL,
    ApprovalRule,
    CatalogQuerySet,
    Cluster,
    Flavor,
    GpuDevice,
    Node,
    NodePool,
    ReclaimPolicy,
    Tier,
    gpu_equivalent_of,
    local_cluster_id,
)
from scheduling.models.project_data import (
    HomeVolume,
    ProjectSecret,
    ProjectWorkspace,
    SecretKind,
    StorageQuota,
    StorageQuotaQuerySet,
    TeamScopedQuerySet,
    VolumeAccessMode,
)
from scheduling.models.quotas import Quota, QuotaQuerySet
from scheduling.models.requests import (
    REQUEST_BODY_FIELDS,
    GpuRequest,
    GpuRequestQuerySet,
    RequestTemplate,
    RequestTemplateQuerySet,
)

__all__ = [
    "LOCAL_CLUSTER_SLUG",
    "MIG_SLICES_PER_GPU",
    "POOL_LABEL",
    "REQUEST_BODY_FIELDS",
    "Allocation",
    "AllocationQuerySet",
    "ApprovalRule",
    "CatalogQuerySet",
    "Cluster",
    "Flavor",
    "GpuDevice",
    "GpuRequest",
    "GpuRequestQuerySet",
    "HomeVolume",
    "Node",
    "NodePool",
    "ProjectSecret",
    "ProjectWorkspace",
    "Quota",
    "QuotaQuerySet",
    "ReclaimPolicy",
    "RequestTemplate",
    "RequestTemplateQuerySet",
    "SchedulerLease",
    "SecretKind",
    "StorageQuota",
    "StorageQuotaQuerySet",
    "TeamScopedQuerySet",
    "Tier",
    "UtilisationSample",
    "VolumeAccessMode",
    "gpu_equivalent_of",
    "local_cluster_id",
]
