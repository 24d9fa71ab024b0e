"""Reads for the fleet pages: every pool's overview (capacity, allocated and stranded
GPU-equivalents, activity, queue waits), and the drill-down: a pool's nodes, a node's GPUs,
and their activity over time.

A GPU's share of an allocation is its claim: a whole card is 1, a vGPU share its memory part of
the card, a MIG slice its slices of seven. Activity is sampled per allocation; a node's or a
GPU's activity in an hour is the mean of the samples of the allocations it held then.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Avg, Q
from django.utils import timezone

from scheduling.choices import FlavorKind, RequestStatus, SharingMode
from scheduling.engine.types import CardUsage, stored_claim_usage
from scheduling.models import (
    MIG_SLICES_PER_GPU,
    Allocation,
    GpuDevice,
    GpuRequest,
    Node,
    NodePool,
    UtilisationSample,
)
from scheduling.selectors.history import recent_admission_waits
from scheduling.selectors.timeline import Window, activity_by_point, step_words, window_between

DEFAULT_RANGE = timedelta(hours=48)
SHORTEST_STEP = timedelta(minutes=15)  # allocations and samples change at this pace


def fleet_window(*, start: datetime, end: datetime) -> Window:
    return window_between(start, end, shortest_step=SHORTEST_STEP)


def claim_share(claim: dict[str, Any], memory_mib: int) -> float:
    """How much of one GPU a claim holds, in GPU-equivalents."""
    if claim.get("mig_profile"):
        return int(str(claim["mig_profile"]).split("g.", 1)[0]) / MIG_SLICES_PER_GPU
    if claim.get("whole", True) or not memory_mib:
        return 1.0
    return min(1.0, claim.get("memory_mib", 0) / memory_mib)


@dataclass(frozen=True, slots=True)
class Series:
    """Points over the window, `step` apart: GPU-equivalents allocated (the peak held at once
    in the point) and mean activity (%)."""

    labels: list[str]
    allocated: list[float]
    activity: list[float | None]
    step: timedelta

    def as_chart(self, title: str, *, capacity: float | None = None) -> dict[str, Any]:
        """Two axes, each with its unit: GPU-equivalents on the left (up to `capacity`, the
        GPUs there are), activity in percent on the right (0–100)."""
        ge_axis: dict[str, Any] = {
            "position": "left",
            "beginAtZero": True,
            "title": {
                "display": True,
                "text": f"GPU-equivalents allocated (peak per {step_words(self.step)})",
            },
        }
        if capacity:
            ge_axis["suggestedMax"] = capacity
        return {
            "type": "line",
            "labels": self.labels,
            "datasets": [
                {
                    "label": f"{title}: allocated GPU-equivalents",
                    "data": self.allocated,
                    "yAxisID": "ge",
                },
                {
                    "label": f"{title}: GPU activity % of held GPUs",
                    "data": self.activity,
                    "yAxisID": "percent",
                },
            ],
            "scales": {
                "ge": ge_axis,
                "percent": {
                    "position": "right",
                    "min": 0,
                    "max": 100,
                    "title": {"display": True, "text": "GPU activity % (of held GPUs)"},
                    "grid": {"drawOnChartArea": False},
                },
            },
        }


def _held_hours(allocation: Allocation, start: datetime, end: datetime, now: datetime) -> float:
    """How many hours of [start, end) the allocation ran (its end: ended_at, else now)."""
    if allocation.started_at is None:
        return 0.0
    stop = min(end, allocation.ended_at or now, now)
    return max((stop - max(start, allocation.started_at)).total_seconds(), 0.0) / 3600


def _peak_held(
    allocations: list[Allocation], share: dict[int, float], start: datetime, end: datetime
) -> float:
    """The most GPU-equivalents held at any one moment of [start, end): two jobs one after the
    other on a card make 1, not 2, so the figure never passes the GPUs there are."""
    changes: list[tuple[datetime, int, float]] = []
    for a in allocations:
        if a.started_at is None or a.started_at >= end or (a.ended_at and a.ended_at <= start):
            continue
        changes.append((max(a.started_at, start), 1, share[a.pk]))
        if a.ended_at is not None and a.ended_at < end:
            changes.append((a.ended_at, 0, -share[a.pk]))  # an end sorts before a start
    held = peak = 0.0
    for _, _, delta in sorted(changes):
        held += delta
        peak = max(peak, held)
    return peak


def _series(allocations: list[Allocation], share: dict[int, float], window: Window) -> Series:
    """1. Allocated per point: the peak GPU-equivalents held at once during it.
    2. Activity per point: mean of the samples of those allocations, from one grouped query."""
    points = window.points
    allocated = [
        round(_peak_held(allocations, share, point, point + window.step), 3) for point in points
    ]
    activity, _ = activity_by_point(
        UtilisationSample.objects.filter(allocation__in=[a.pk for a in allocations]), window
    )
    return Series(window.labels(), allocated, activity, window.step)


def _allocations_on(node_names: list[str], window: Window) -> list[Allocation]:
    """Allocations that held a GPU of these nodes at any time in the window, and those that
    hold one now."""
    if not node_names:
        return []
    on_node = Q()
    for name in node_names:
        on_node |= Q(node_name__contains=name)
    return list(
        Allocation.objects.filter(on_node, started_at__isnull=False)
        .filter(Q(ended_at__isnull=True) | Q(started_at__lt=window.end, ended_at__gt=window.start))
        .select_related("request__project__team", "request__flavor")
        .order_by("pk")
    )


@dataclass(frozen=True, slots=True)
class NodeRow:
    node: Node
    gpus: int
    allocated: float
    activity_percent: float | None


@dataclass(frozen=True, slots=True)
class PoolDetail:
    pool: NodePool
    nodes: list[NodeRow]
    series: Series


def _latest_activity(allocation_ids: list[int], now: datetime) -> dict[int, float]:
    latest: dict[int, float] = {}
    for allocation_id, activity in (
        UtilisationSample.objects.filter(
            allocation__in=allocation_ids, sampled_at__gt=now - timedelta(minutes=10)
        )
        .order_by("allocation_id", "sampled_at")
        .values_list("allocation_id", "activity_percent")
    ):
        latest[allocation_id] = activity
    return latest


def pool_detail(*, pool: NodePool, window: Window, now: datetime | None = None) -> PoolDetail:
    """The pool's nodes with what they hold now and how busy, and the pool over the window."""
    now = now or timezone.now()
    nodes = list(Node.objects.filter(pool=pool).order_by("name"))
    memory = {
        (d.node.name, d.index): d.memory_mib
        for d in GpuDevice.objects.filter(node__pool=pool).select_related("node")
    }
    gpus: dict[str, int] = defaultdict(int)
    for node_name, _ in memory:
        gpus[node_name] += 1
    allocations = [
        a for a in _allocations_on([n.name for n in nodes], window) if a.pool_id == pool.pk
    ]
    share_by_node: dict[int, dict[str, float]] = {}
    for allocation in allocations:
        per_node: dict[str, float] = defaultdict(float)
        for claim in allocation.claims:
            per_node[claim["node"]] += claim_share(
                claim, memory.get((claim["node"], claim["device_index"]), 0)
            )
        share_by_node[allocation.pk] = per_node
    live = [a for a in allocations if a.ended_at is None]
    latest = _latest_activity([a.pk for a in live], now)
    rows = []
    for node in nodes:
        holding = [a for a in live if share_by_node[a.pk].get(node.name)]
        busy = [latest[a.pk] for a in holding if a.pk in latest]
        rows.append(
            NodeRow(
                node=node,
                gpus=gpus.get(node.name, 0),
                allocated=round(sum(share_by_node[a.pk][node.name] for a in holding), 3),
                activity_percent=round(sum(busy) / len(busy), 1) if busy else None,
            )
        )
    share = {a.pk: sum(share_by_node[a.pk].values()) for a in allocations}
    return PoolDetail(pool=pool, nodes=rows, series=_series(allocations, share, window))


@dataclass(frozen=True, slots=True)
class GpuRow:
    device: GpuDevice
    holders: list[tuple[Allocation, float]]  # live allocations on it and their share
    activity_percent: float | None  # latest sample of its holders
    # Mean activity while held in the window, weighted by GPU-hours held (free time not counted)
    window_activity_percent: float | None
    # GPU-hours held in the window ÷ the window's hours: finance's idle capacity is the rest
    held_percent: float = 0.0


@dataclass(frozen=True, slots=True)
class NodeDetail:
    node: Node
    gpus: list[GpuRow]
    series: Series
    held_percent: float | None = None  # of all its GPUs' hours in the window
    activity_while_held_percent: float | None = None  # weighted by GPU-hours held

    @property
    def idle_percent(self) -> float | None:
        """Finance's idle capacity on this node over the window: hours no one held a GPU."""
        return None if self.held_percent is None else round(100 - self.held_percent, 1)


def node_detail(*, node: Node, window: Window, now: datetime | None = None) -> NodeDetail:
    """The node's GPUs with who holds each now and how busy, and the node over the window."""
    now = now or timezone.now()
    devices = list(GpuDevice.objects.filter(node=node).order_by("index"))
    memory = {d.index: d.memory_mib for d in devices}
    allocations = [
        a
        for a in _allocations_on([node.name], window)
        if any(c["node"] == node.name for c in a.claims)
    ]
    on_device: dict[int, list[tuple[Allocation, float]]] = defaultdict(list)
    share: dict[int, float] = {}
    for allocation in allocations:
        mine = [c for c in allocation.claims if c["node"] == node.name]
        share[allocation.pk] = sum(claim_share(c, memory.get(c["device_index"], 0)) for c in mine)
        for claim in mine:
            on_device[claim["device_index"]].append(
                (allocation, claim_share(claim, memory.get(claim["device_index"], 0)))
            )
    latest = _latest_activity([a.pk for a in allocations if a.ended_at is None], now)
    window_means = dict(
        UtilisationSample.objects.filter(
            allocation__in=[a.pk for a in allocations],
            sampled_at__gte=window.start,
            sampled_at__lt=window.end,
        )
        .values("allocation_id")
        .annotate(mean=Avg("activity_percent"))
        .values_list("allocation_id", "mean")
    )
    rows = []
    node_weights: list[tuple[float, float]] = []
    held_hours = 0.0
    for device in devices:
        everyone = on_device.get(device.index, [])
        holders = [(a, s) for a, s in everyone if a.ended_at is None]
        busy = [latest[a.pk] for a, _ in holders if a.pk in latest]
        # As finance's efficiency: each measured allocation weighted by the GPU-hours it held
        # this card in the window; hours the card was free are not counted as idle.
        weights = [
            (s * _held_hours(a, window.start, window.end, now), window_means[a.pk])
            for a, s in everyone
            if a.pk in window_means
        ]
        held = sum(weight for weight, _ in weights)
        node_weights += weights
        card_hours = min(
            sum(s * _held_hours(a, window.start, window.end, now) for a, s in everyone),
            window.hours,
        )
        held_hours += card_hours
        rows.append(
            GpuRow(
                device=device,
                holders=holders,
                activity_percent=round(sum(busy) / len(busy), 1) if busy else None,
                window_activity_percent=(
                    round(sum(w * mean for w, mean in weights) / held, 1) if held else None
                ),
                held_percent=round(100 * card_hours / window.hours, 1) if window.hours else 0.0,
            )
        )
    measured = sum(weight for weight, _ in node_weights)
    return NodeDetail(
        node=node,
        gpus=rows,
        series=_series(allocations, share, window),
        held_percent=(
            round(100 * held_hours / (window.hours * len(devices)), 1)
            if devices and window.hours
            else None
        ),
        activity_while_held_percent=(
            round(sum(w * mean for w, mean in node_weights) / measured, 1) if measured else None
        ),
    )


@dataclass(frozen=True, slots=True)
class PoolOverview:
    pool: str  # its slug, for links
    name: str
    sharing_mode: str
    gpus: int
    allocated_gpu_equivalents: float
    stranded_gpu_equivalents: float
    activity_percent: float | None
    queued: int
    wait_p50_seconds: float | None
    wait_p90_seconds: float | None
    wait_p99_seconds: float | None
    # Lifecycle isolation: the pool's short-request reserve and whether it works, i.e. the
    # waits of short requests (max runtime up to the pool's threshold) against long ones.
    short_reserve: str = ""
    short_wait_p50_seconds: float | None = None
    short_wait_p90_seconds: float | None = None
    long_wait_p50_seconds: float | None = None
    long_wait_p90_seconds: float | None = None


def _percentile(values: list[float], fraction: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def fleet_overview(*, since_days: int = 7) -> list[PoolOverview]:
    """Per pool: capacity, what is allocated, what is stranded, how busy, how long work waits.

    Stranded capacity is free capacity no flavor of the pool can use: vGPU memory or cores left
    on a shared card below the smallest share, MIG slices fewer than the smallest profile.
    """
    now = timezone.now()
    active = list(Allocation.objects.active().select_related("request", "pool").order_by("pk"))
    used: dict[tuple[str, int], CardUsage] = {}
    for allocation in active:
        for claim in allocation.claims:
            key = (claim["node"], claim["device_index"])
            used[key] = used.get(key, CardUsage()) + stored_claim_usage(claim)
    latest: dict[int, float] = {}
    for allocation_id, activity in (
        UtilisationSample.objects.filter(
            allocation__in=active, sampled_at__gt=now - timedelta(minutes=10)
        )
        .order_by("allocation_id", "sampled_at")
        .values_list("allocation_id", "activity_percent")
    ):
        latest[allocation_id] = activity
    pools = list(NodePool.objects.order_by("slug"))
    waits_by_length = recent_admission_waits(
        pools={p.pk: p for p in pools}, since=now - timedelta(days=since_days)
    )
    overview = []
    for pool in pools:
        flavors = list(pool.flavors.filter(is_active=True))
        devices = list(GpuDevice.objects.filter(node__pool=pool).select_related("node"))
        smallest_memory = min(
            (f.gpu_memory_mib for f in flavors if f.kind == FlavorKind.VGPU), default=0
        )
        smallest_cores = min(
            (f.gpu_cores_percent for f in flavors if f.kind == FlavorKind.VGPU), default=0
        )
        smallest_slices = min(
            (int(f.mig_profile.split("g.", 1)[0]) for f in flavors if f.kind == FlavorKind.MIG),
            default=MIG_SLICES_PER_GPU,
        )
        stranded = 0.0
        for device in devices:
            held = used.get((device.node.name, device.index))
            if held is None or held.whole:
                continue
            if pool.sharing_mode == SharingMode.VGPU and not held.mig_mask:
                free_memory = device.memory_mib - held.memory_mib
                free_cores = 100 - held.cores_percent
                if free_memory < smallest_memory or free_cores < smallest_cores:
                    stranded += min(free_memory / device.memory_mib, free_cores / 100)
            elif pool.sharing_mode == SharingMode.MIG and held.mig_mask:
                free_slices = MIG_SLICES_PER_GPU - held.mig_slices
                if free_slices < smallest_slices:
                    stranded += free_slices / MIG_SLICES_PER_GPU
        in_pool = [a for a in active if a.pool_id == pool.pk]
        activities = [latest[a.pk] for a in in_pool if a.pk in latest]
        short_waits = waits_by_length.get((pool.pk, True), [])
        long_waits = waits_by_length.get((pool.pk, False), [])
        waits = short_waits + long_waits
        overview.append(
            PoolOverview(
                pool=pool.slug,
                name=pool.name,
                sharing_mode=pool.sharing_mode,
                gpus=len(devices),
                allocated_gpu_equivalents=round(
                    sum(float(a.request.gpu_equivalent) for a in in_pool), 3
                ),
                stranded_gpu_equivalents=round(stranded, 3),
                activity_percent=round(sum(activities) / len(activities), 1)
                if activities
                else None,
                queued=GpuRequest.objects.filter(
                    status=RequestStatus.QUEUED, flavor__pool=pool
                ).count(),
                wait_p50_seconds=_percentile(waits, 0.5),
                wait_p90_seconds=_percentile(waits, 0.9),
                wait_p99_seconds=_percentile(waits, 0.99),
                short_reserve=pool.short_reserve_label,
                short_wait_p50_seconds=_percentile(short_waits, 0.5),
                short_wait_p90_seconds=_percentile(short_waits, 0.9),
                long_wait_p50_seconds=_percentile(long_waits, 0.5),
                long_wait_p90_seconds=_percentile(long_waits, 0.9),
            )
        )
    return overview
