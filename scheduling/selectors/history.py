"""Reads of past work: the queue waits of recent admissions, and how actual runtimes compared
with the declared max runtime."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from scheduling.choices import RequestStatus
from scheduling.engine.forecast import RatioBand, blend, ratio_band
from scheduling.models import Allocation, GpuRequest, NodePool


def recent_admission_waits(
    *, pools: dict[int, NodePool], since: datetime
) -> dict[tuple[int, bool], list[float]]:
    """Queue waits (seconds) of the work admitted to these pools since `since`, keyed by
    (pool id, is short): short means a max runtime up to the pool's short-request threshold."""
    waits: dict[tuple[int, bool], list[float]] = {}
    for pool_id, admitted, queued_at, runtime in Allocation.objects.filter(
        pool_id__in=pools, admitted_at__gt=since
    ).values_list("pool_id", "admitted_at", "request__queued_at", "request__max_runtime_seconds"):
        if queued_at is not None and admitted >= queued_at:
            short = runtime <= pools[pool_id].short_max_runtime_seconds
            waits.setdefault((pool_id, short), []).append((admitted - queued_at).total_seconds())
    return waits


#: Statuses whose run ended by itself or by its owner: their runtimes say how long work runs.
RAN_TO_AN_END = (
    RequestStatus.SUCCEEDED,
    RequestStatus.FAILED,
    RequestStatus.CANCELLED,
    RequestStatus.RECLAIMED,
)


@dataclass(frozen=True, slots=True)
class RuntimeHistory:
    """How actual runtimes compared with the declared max runtime lately, by owner and flavor.

    `band_for` blends the owner's and the flavor's ratio bands (engine/forecast.py): little
    history stays close to "runs its declared max".
    """

    by_owner: dict[int, RatioBand]
    by_flavor: dict[int, RatioBand]

    def band_for(self, *, owner_id: int, flavor_id: int) -> RatioBand:
        return blend(self.by_owner.get(owner_id), self.by_flavor.get(flavor_id))


def runtime_history(
    *, now: datetime | None = None, since_days: int = 90, limit: int = 20_000
) -> RuntimeHistory:
    """Ratio actual/declared runtime of the runs that ended in the last `since_days` days
    (the newest `limit`), as bands per owner and per flavor."""
    now = now or timezone.now()
    by_owner: dict[int, list[float]] = {}
    by_flavor: dict[int, list[float]] = {}
    rows = (
        GpuRequest.objects.filter(
            status__in=RAN_TO_AN_END,
            started_at__isnull=False,
            finished_at__gt=now - timedelta(days=since_days),
            max_runtime_seconds__gt=0,
        )
        .order_by("-finished_at")
        .values_list("owner_id", "flavor_id", "started_at", "finished_at", "max_runtime_seconds")
    )[:limit]
    for owner_id, flavor_id, started_at, finished_at, declared in rows:
        if finished_at < started_at:
            continue
        ratio = (finished_at - started_at).total_seconds() / declared
        by_owner.setdefault(owner_id, []).append(ratio)
        by_flavor.setdefault(flavor_id, []).append(ratio)
    return RuntimeHistory(
        by_owner={k: ratio_band(v) for k, v in by_owner.items()},
        by_flavor={k: ratio_band(v) for k, v in by_flavor.items()},
    )


def ratio_bands_by_request(
    request_ids: list[int], *, history: RuntimeHistory
) -> dict[str, RatioBand]:
    """The blended ratio band of each request, keyed as the engine names requests (str pk)."""
    return {
        str(pk): history.band_for(owner_id=owner_id, flavor_id=flavor_id)
        for pk, owner_id, flavor_id in GpuRequest.objects.filter(pk__in=request_ids).values_list(
            "pk", "owner_id", "flavor_id"
        )
    }
