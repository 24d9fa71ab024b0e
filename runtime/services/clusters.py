"""Running a cluster-wide pass on every cluster, each with its own failures.

Inventory, workload sync, reclaim and project data go cluster by cluster: one cluster's outage
is recorded on it (`Cluster.last_error`, shown on the fleet page) and the others are served as
usual. The first failure is raised again once every cluster has had its turn, so a task's
retry policy still sees it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from django.utils import timezone

from runtime.cluster.base import ClusterBackend, ClusterError
from runtime.services.execution import backend_for
from scheduling.models import Cluster

log = logging.getLogger(__name__)

T = TypeVar("T")


def clusters() -> list[Cluster]:
    """Every cluster, the local one first: inactive ones too, since what runs there stays."""
    return sorted(Cluster.objects.all(), key=lambda cluster: (not cluster.is_local, cluster.slug))


def record_contact(cluster: Cluster) -> None:
    Cluster.objects.filter(pk=cluster.pk).update(last_contact_at=timezone.now())


def record_failure(cluster: Cluster, error: Exception) -> None:
    Cluster.objects.filter(pk=cluster.pk).update(
        last_error=str(error)[:1000] or type(error).__name__, last_error_at=timezone.now()
    )


def on_each_cluster(
    action: Callable[[Cluster, ClusterBackend], T],
    *,
    only: Callable[[Cluster], bool] = lambda cluster: True,
) -> dict[str, T]:
    """`action(cluster, backend)` for every cluster `only` accepts; returns each answer by
    cluster slug. A cluster that fails is recorded and skipped; the first failure is raised
    after the others ran."""
    answers: dict[str, T] = {}
    first_error: ClusterError | None = None
    for cluster in clusters():
        if not only(cluster):
            continue
        try:
            answers[cluster.slug] = action(cluster, backend_for(cluster))
        except ClusterError as error:
            log.warning("cluster %s: %s", cluster.slug, error)
            record_failure(cluster, error)
            first_error = first_error or error
            continue
        record_contact(cluster)
    if first_error is not None:
        raise first_error
    return answers
