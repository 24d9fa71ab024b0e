"""Stopping a preempted workload with notice: the deadline on its pods, then SIGTERM with its
tier's grace period (docs/execution.md, "Preemption with notice")."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.utils import timezone

from runtime.cluster.base import ClusterBackend
from runtime.services.execution import attempt_backend
from scheduling.models import GpuRequest

log = logging.getLogger(__name__)


def preempt_request_workload(
    *, request_id: int, attempt: int, backend: ClusterBackend | None = None
) -> int:
    """Give the attempt's pods the preemption notice, then delete them with the tier's grace.

    1. Read the request and its tier's grace period.
    2. Annotate the pods that are not stopping yet with the deadline (now + grace).
    3. Terminate the workload with that grace: SIGTERM now, SIGKILL at the deadline.
    4. Record the deadline the pods were given on the request, unless it was admitted again.

    Safe to repeat: a pod already stopping keeps the notice and grace it was given. Returns how
    many pods were told.
    """
    # 1. Read.
    request = GpuRequest.objects.select_related("project", "flavor__pool__tier").get(pk=request_id)
    grace = request.flavor.pool.tier.preemption_grace
    backend = backend or attempt_backend(request_id, attempt)
    namespace, key = request.project.namespace, str(request.pk)
    # 2. Notice.
    deadline = timezone.now() + timedelta(seconds=grace)
    told = backend.give_notice(
        namespace, key, attempt, deadline=deadline.isoformat(timespec="seconds")
    )
    # 3. SIGTERM, SIGKILL after the grace period.
    backend.terminate(namespace, key, attempt, reason="preempted", grace_seconds=grace)
    # 4. Record: the request's attempt is still the preempted one until it is admitted again.
    if told:
        GpuRequest.objects.filter(pk=request_id, attempt=attempt).update(
            preemption_deadline_at=deadline.replace(microsecond=0)
        )
    log.info("preempted %s/%s a%s: %s pods told, %s s grace", namespace, key, attempt, told, grace)
    return told
