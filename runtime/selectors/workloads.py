"""The work a runtime pass acts on: requests live on a cluster, and those stuck on their way
to it."""

from __future__ import annotations

from collections.abc import Collection
from datetime import timedelta

from django.conf import settings
from django.db.models import Exists, OuterRef
from django.utils import timezone

from scheduling.choices import RequestStatus
from scheduling.models import Allocation, Cluster, GpuRequest

LIVE_STATUSES = (RequestStatus.LAUNCHING, RequestStatus.RUNNING)
# The request's `waiting_code` while Kueue holds its Job: the reclaim's pending timeout and the
# stuck sweep leave it alone.
KUEUE_WAIT_CODE = "kueue"


def live_requests_on(
    cluster: Cluster | None, *, ids: Collection[int] | None = None
) -> list[GpuRequest]:
    """Launching and running requests placed on `cluster` (every one when None), of `ids` only
    when given. The local cluster also answers for live requests that have no allocation to
    say where they run. With the team and owner a move's audit event and notice name."""
    live = GpuRequest.objects.filter(status__in=LIVE_STATUSES).select_related(
        "project__team", "team", "owner"
    )
    if ids is not None:
        live = live.filter(pk__in=ids)
    if cluster is not None:
        placed = Allocation.objects.filter(request=OuterRef("pk"), ended_at__isnull=True)
        here = placed.filter(pool__cluster_id=cluster.pk)
        elsewhere = placed.exclude(pool__cluster_id=cluster.pk)
        live = live.exclude(Exists(elsewhere)) if cluster.is_local else live.filter(Exists(here))
    return list(live)


def stuck_requests(*, older_than_seconds: int | None = None) -> list[tuple[int, int]]:
    """(request id, attempt) of requests admitted or launching for too long: launch them again.
    A Job waiting in Kueue's queue is where it should be, however long it waits. A launch that
    finished (its workload named on the allocation) waits for the status sync to see its pod
    run, for up to LAUNCH_QUEUE_PATIENCE_SECONDS, before it is launched again."""
    seconds = older_than_seconds or settings.STUCK_TRANSITION_SECONDS
    now = timezone.now()
    cutoff = now - timedelta(seconds=seconds)
    patience = max(seconds, settings.LAUNCH_QUEUE_PATIENCE_SECONDS)
    launched = Allocation.objects.active().filter(
        request=OuterRef("pk"), attempt=OuterRef("attempt"), workload_name__gt=""
    )
    return list(
        GpuRequest.objects.filter(
            status__in=(RequestStatus.ADMITTED, RequestStatus.LAUNCHING), updated_at__lt=cutoff
        )
        .exclude(waiting_code=KUEUE_WAIT_CODE)
        .exclude(
            Exists(launched),
            status=RequestStatus.LAUNCHING,
            updated_at__gte=now - timedelta(seconds=patience),
        )
        .values_list("pk", "attempt")
    )
