"""For each Kueue-mode cluster: what the last check of its Kueue objects against the portal's
policy found. The runtime's periodic reconcile writes it, cluster by cluster; the fleet page and
/metrics read it.

Kept in the cache (Redis in production): a status that the next check replaces, not a record.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.core.cache import cache
from django.utils import timezone

from scheduling.choices import SchedulerMode
from scheduling.models import LOCAL_CLUSTER_SLUG, Cluster

CACHE_KEY = "kueue-policy-check"
# Kept well past the check period, so a stalled checker shows as an old check, not as nothing.
KEEP_SECONDS = 24 * 3600


@dataclass(frozen=True)
class PolicyCheck:
    checked_at: datetime
    # One line per object that differed ("update ClusterQueue gpu-portal-vision (spec...)").
    differences: tuple[str, ...]
    applied: bool
    error: str = ""
    cluster: str = LOCAL_CLUSTER_SLUG


@dataclass(frozen=True)
class ClusterCheck:
    """A Kueue-mode cluster (by slug and name) and its last check, None before the first."""

    slug: str
    name: str
    check: PolicyCheck | None


def _key(cluster: str) -> str:
    return f"{CACHE_KEY}:{cluster}"


def record_check(
    differences: list[str],
    *,
    applied: bool,
    error: str = "",
    cluster: str = LOCAL_CLUSTER_SLUG,
) -> PolicyCheck:
    """Keep what the check of `cluster` (a slug) found, replacing its previous check."""
    check = PolicyCheck(timezone.now(), tuple(differences), applied, error, cluster)
    cache.set(_key(cluster), check, KEEP_SECONDS)
    return check


def last_check(cluster: str = LOCAL_CLUSTER_SLUG) -> PolicyCheck | None:
    found = cache.get(_key(cluster))
    return found if isinstance(found, PolicyCheck) else None


def kueue_checks() -> list[ClusterCheck]:
    """Every Kueue-mode cluster with its last check, the local cluster first (listed under
    SCHEDULER=kueue even before a pool made its row), then the others by name."""
    kueue_clusters: list[tuple[str, str]] = []
    if settings.SCHEDULER == SchedulerMode.KUEUE:
        local = Cluster.objects.filter(slug=LOCAL_CLUSTER_SLUG).values_list("name", flat=True)
        kueue_clusters.append((LOCAL_CLUSTER_SLUG, local.first() or "Local cluster"))
    registered = (
        Cluster.objects.exclude(kubeconfig_sealed="")
        .filter(scheduler=SchedulerMode.KUEUE)
        .order_by("name")
        .values_list("slug", "name")
    )
    kueue_clusters += list(registered)
    found = cache.get_many([_key(slug) for slug, _ in kueue_clusters])
    return [
        ClusterCheck(
            slug, name, check if isinstance(check := found.get(_key(slug)), PolicyCheck) else None
        )
        for slug, name in kueue_clusters
    ]
