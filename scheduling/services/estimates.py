"""Estimated starts: run the queue forward with the engine (scheduling/engine/forecast.py).

`refresh_start_estimates` runs after scheduling cycles (a throttled task, see
scheduling/dispatch.py): (1) read the snapshot and the runtime history, (2) forecast, (3) write
each queued request's estimate and interval in batched UPDATEs, clearing those of requests that
left the queue. `estimate_queued_request` gives a request that just entered the queue its
estimate at once, without waiting for the next refresh. `what_if_for_project` answers "when
would it start if I submitted it now?" per flavor, the one answer the request form and the API
give, without writing anything. See docs/estimates.md.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from django.core.cache import cache

from scheduling.choices import Priority, RequestStatus, WorkloadKind
from scheduling.engine.forecast import forecast
from scheduling.engine.types import Snapshot
from scheduling.models import Flavor, GpuRequest
from scheduling.selectors.catalog import flavors_for_project
from scheduling.selectors.history import ratio_bands_by_request, runtime_history
from scheduling.selectors.scheduler_modes import kueue_cluster_ids
from scheduling.selectors.snapshot import (
    PENDING_FIELDS,
    build_snapshot,
    engine_request,
    offered_pools,
)
from scheduling.services.cycle import POLICY
from tenants.models import Project

log = logging.getLogger(__name__)

#: Simulated cycles per forecast: enough for the queues we see, bounded so a refresh stays fast.
MAX_STEPS = 200
WHAT_IF_MAX_STEPS = 120
#: A simulated cycle costs about (queued requests + GPUs) units, ~70 us each on the benchmark
#: machine; a forecast's runs (three with the interval) share this many units, ~15 s, so large
#: fleets simulate fewer cycles (docs/estimates.md).
WORK_BUDGET = 240_000
MIN_STEPS = 1
#: The what-if answers a page: its runs together get at most this many units (~4 s).
WHAT_IF_BUDGET = 60_000


def steps_for(snapshot: Snapshot, limit: int, *, runs: int = 3, budget: int = WORK_BUDGET) -> int:
    """How many cycles each of a forecast's `runs` may simulate within `budget` units."""
    per_step = max(1, len(snapshot.pending) + len(snapshot.devices))
    return max(MIN_STEPS, min(limit, budget // (per_step * runs)))


ESTIMATE_FIELDS = ["estimated_start_at", "estimate_low_at", "estimate_high_at"]


def _at(seconds: float | None) -> datetime | None:
    return datetime.fromtimestamp(round(seconds), tz=UTC) if seconds is not None else None


def refresh_start_estimates(*, now: float | None = None) -> int:
    """Store the estimated start and its interval on every queued request; returns how many
    rows changed. Kueue decides for the clusters in its mode, so their requests get no estimate."""
    now = now if now is not None else time.time()
    # 1. Read.
    snapshot = build_snapshot(kueue_clusters=kueue_cluster_ids())
    ids = [int(a.request_id) for a in snapshot.allocations] + [int(r.id) for r in snapshot.pending]
    bands = ratio_bands_by_request(ids, history=runtime_history())
    # 2. Forecast.
    starts = forecast(
        snapshot, now=now, bands=bands, policy=POLICY, max_steps=steps_for(snapshot, MAX_STEPS)
    )
    # 3. Write what changed.
    wanted = {
        int(r.id): (
            _at(f.start_at),
            _at(f.low_at),
            _at(f.high_at),
        )
        if (f := starts.get(r.id)) is not None
        else (None, None, None)
        for r in snapshot.pending
    }
    stored = {
        pk: tuple(values)
        for pk, *values in GpuRequest.objects.filter(
            pk__in=list(wanted), status=RequestStatus.QUEUED
        ).values_list("pk", *ESTIMATE_FIELDS)
    }
    changed = [
        GpuRequest(pk=pk, **dict(zip(ESTIMATE_FIELDS, values, strict=True)))
        for pk, values in wanted.items()
        if pk in stored and stored[pk] != values
    ]
    GpuRequest.objects.bulk_update(changed, ESTIMATE_FIELDS, batch_size=500)
    cleared = (
        GpuRequest.objects.exclude(status=RequestStatus.QUEUED)
        .filter(estimated_start_at__isnull=False)
        .update(estimated_start_at=None, estimate_low_at=None, estimate_high_at=None)
    )
    return len(changed) + cleared


#: A request the forecast cannot place is not forecast again for it by the pages sooner than
#: this; the refresh after cycles comes by as often.
FIRST_ESTIMATE_RETRY_SECONDS = 30


def estimate_queued_request(*, request_id: int, now: float | None = None) -> bool:
    """Store the estimate of a queued request that has none yet (it just entered the queue),
    from a forecast of the queue that stops once it starts; the next refresh keeps it current.
    Returns whether an estimate was stored. Pages call it on each view: one forecast per
    request per FIRST_ESTIMATE_RETRY_SECONDS at most."""
    now = now if now is not None else time.time()
    try:
        first = cache.add(
            f"scheduling:first-estimate:{request_id}", now, FIRST_ESTIMATE_RETRY_SECONDS
        )
    except Exception:  # without the cache nothing bounds the retries: leave it to the refresh
        log.warning("cache unavailable; request %s waits for the refresh", request_id)
        return False
    if not first:
        return False
    # 1. Read.
    kueue = kueue_cluster_ids()
    snapshot = build_snapshot(kueue_clusters=kueue)
    rid = str(request_id)
    if not any(r.id == rid for r in snapshot.pending):
        return False  # no longer queued, backing off, or Kueue's to decide
    ids = [int(a.request_id) for a in snapshot.allocations] + [int(r.id) for r in snapshot.pending]
    bands = ratio_bands_by_request(ids, history=runtime_history())
    # 2. Forecast, within what a page may spend.
    got = forecast(
        snapshot,
        now=now,
        bands=bands,
        policy=POLICY,
        targets=(rid,),
        max_steps=steps_for(snapshot, MAX_STEPS, budget=WHAT_IF_BUDGET),
    ).get(rid)
    if got is None:
        return False
    # 3. Write, unless it left the queue or a refresh wrote one meanwhile.
    return bool(
        GpuRequest.objects.filter(
            pk=request_id, status=RequestStatus.QUEUED, estimated_start_at__isnull=True
        ).update(
            estimated_start_at=_at(got.start_at),
            estimate_low_at=_at(got.low_at),
            estimate_high_at=_at(got.high_at),
        )
    )


@dataclass(frozen=True, slots=True)
class WhatIf:
    """When a request of `flavor` submitted now would likely start; None: not within the
    simulated horizon (the queue is long, or the team's quota never allows it)."""

    flavor: Flavor
    start_at: datetime | None
    wait_seconds: float | None


def what_if(
    *,
    project: Project,
    owner: Any,
    flavors: Iterable[Flavor],
    gpu_count: int = 1,
    max_runtime_seconds: int = 7200,
    kind: str = WorkloadKind.JOB,
    now: float | None = None,
) -> list[WhatIf]:
    """For each flavor, the estimated start of a request submitted now (before any approval
    it may need): one typical forecast per flavor, the request last in its age."""
    now = now if now is not None else time.time()
    asked = list(flavors)
    kueue = kueue_cluster_ids()
    flavors = [f for f in asked if f.pool.cluster_id not in kueue]  # Kueue decides the others
    if not flavors:
        return [WhatIf(flavor, None, None) for flavor in asked]
    snapshot = build_snapshot(kueue_clusters=kueue)
    offered = offered_pools(kueue)
    if (len(snapshot.pending) + len(snapshot.devices)) * len(flavors) > WHAT_IF_BUDGET:
        # A page must answer in a moment: a fleet this large gets no what-if.
        return [WhatIf(flavor, None, None) for flavor in asked]
    history = runtime_history()
    ids = [int(a.request_id) for a in snapshot.allocations] + [int(r.id) for r in snapshot.pending]
    bands = ratio_bands_by_request(ids, history=history)
    created = datetime.fromtimestamp(now, tz=UTC)
    answers: dict[int, WhatIf] = {}
    for flavor in flavors:
        rid = f"what-if-{flavor.pk}"
        known = {
            "pk": 0,
            "team__slug": project.team.slug,
            "project__slug": project.slug,
            "flavor__slug": flavor.slug,
            "created_at": created,
            # Its owner's: fair share inside the team places it behind the owner's own queue.
            "owner_id": owner.pk,
            "gpu_count": gpu_count,
            "kind": kind,
            "priority": Priority.NORMAL,
            "is_preemptible": False,
            "allow_shared_node": True,
            "flavor__gpu_model": flavor.gpu_model,
            "flavor__mig_profile": flavor.mig_profile,
            "max_runtime_seconds": max_runtime_seconds,
            "flavor__pool__slug": flavor.pool.slug,
            "flavor__pool__cluster_id": flavor.pool.cluster_id,
        }
        # A queued row as the snapshot reads it (PENDING_FIELDS); the rest left empty.
        row = {field: known.get(field) for field in PENDING_FIELDS}
        request = replace(engine_request(row, offered), id=rid, submitted_at=now)
        step = replace(snapshot, pending=(*snapshot.pending, request))
        band = history.band_for(owner_id=owner.pk, flavor_id=flavor.pk)
        got = forecast(
            step,
            now=now,
            bands={**bands, rid: band},
            policy=POLICY,
            targets=(rid,),
            max_steps=steps_for(step, WHAT_IF_MAX_STEPS, runs=len(flavors), budget=WHAT_IF_BUDGET),
            with_interval=False,
        ).get(rid)
        answers[flavor.pk] = WhatIf(
            flavor,
            _at(got.start_at) if got else None,
            max(0.0, got.start_at - now) if got else None,
        )
    return [answers.get(flavor.pk) or WhatIf(flavor, None, None) for flavor in asked]


def what_if_flavors(*, project: Project, kind: str) -> list[Flavor]:
    """The flavors a what-if answers for: those the project may use whose pool runs `kind`,
    by name."""
    return [
        flavor
        for flavor in flavors_for_project(project=project).order_by("name")
        if flavor.pool.allows_kind(kind)
    ]


def what_if_for_project(
    *,
    project: Project,
    owner: Any,
    gpu_count: int = 1,
    max_runtime_seconds: int = 7200,
    kind: str = WorkloadKind.JOB,
    now: float | None = None,
) -> list[WhatIf]:
    """The what-if of the request form and of `GET /api/v1/requests/what-if/`: the same
    question gets the same flavors, the same forecast horizon and so the same answer."""
    return what_if(
        project=project,
        owner=owner,
        flavors=what_if_flavors(project=project, kind=kind),
        gpu_count=gpu_count,
        max_runtime_seconds=max_runtime_seconds,
        kind=kind,
        now=now,
    )
