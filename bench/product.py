"""W-GPU-2k shaped like the product: every request pinned to its flavor's pool and GPU model.

The portal's requests always name a flavor, a flavor belongs to one pool and one GPU model, and
`scheduling/selectors/snapshot.py` turns each request into an engine request with
`pinned_model=flavor.gpu_model` and `pools=(pool,)`; every node carries its
pool's label and the pool's taints, which admission to the pool tolerates; all teams share one
cohort ("organisation"); quotas are whole units of a flavor, counted in GPU-equivalents by the
flavor's weight (four decimals, as `Flavor.gpu_equivalent` stores it).

This module draws the fleet and the queue as plain rows (what the database holds) and builds the
engine snapshot from them the way `build_snapshot()` does, without Django.  `bench.engine_db`
loads the same rows into PostgreSQL and checks that `build_snapshot()` reads back exactly this
snapshot, so the in-memory figures and the database cycle plan the same workload.

Fleet (scale=1.0): 2,000 nodes x 8 GPUs = 16,000 GPUs in five pools, one GPU model each:

  pool           sharing    model      nodes  flavors
  a100-training  exclusive  A100-80G     700  a100-80g (whole card)
  a100-vgpu      vgpu       A100-80G     500  a100-10g, a100-20g, a100-40g
  h100-training  exclusive  H100-80G     300  h100-80g (whole card)
  h100-mig       mig        H100-80G     200  h100-1g, h100-2g, h100-3g
  l4             exclusive  L4           300  l4-24g (whole card)

Queue: 55% whole cards (A100/H100/L4 50/30/20; 1/2/4/8 cards 70/15/10/5%, 8 cards want a node of
their own), 35% vGPU shares, 10% MIG slices, 1% of the shares asking for 2-4 on one node; four
priority classes as in the product (low 35%, normal 40%, high 20%, critical 5%); 200 teams with
Zipf quota weights (guaranteed per pool summing to 1.2x the pool, limits 2x) and Zipf demand;
log-normal runtimes.  Each pool starts 60% full with randomly placed running work.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import numpy as np

from scheduling.engine.types import (
    MIG_PROFILES,
    Allocation,
    DeviceClaim,
    Flavor,
    GpuDevice,
    Node,
    Pool,
    Quota,
    Request,
    Snapshot,
    Taint,
    Team,
    mig_bits,
)

# Every request has one owner: bench.engine_db loads them for its one user, the first row.
OWNER = "1"
POOL_LABEL = "gpu-portal/pool"  # scheduling.models.POOL_LABEL
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
ALL_KINDS = ("job", "notebook", "service")  # scheduling.choices.WorkloadKind
PROJECT_SLUG = "main"  # every team has one project (bench.engine_db creates it so)
#: scheduling.choices.Priority -> engine priority (scheduling.selectors.snapshot.ENGINE_PRIORITY)
ENGINE_PRIORITY = {"low": 1, "normal": 2, "high": 3, "critical": 4}
PRIORITIES = ("low", "normal", "high", "critical")
PRIORITY_P = (0.35, 0.40, 0.20, 0.05)
NOW = 1_800_000_000.0
#: Share of pending vGPU/MIG requests that ask for several shares (HAMi `nvidia.com/gpu: N`,
#: `nvidia.com/mig-1g.10gb: N`), and how many; drawn from a generator of its own.
MULTI_SHARE = 0.01
MULTI_COUNTS = (2, 3, 4)
MULTI_P = (0.6, 0.25, 0.15)
MULTI_SEED_OFFSET = 7919


@dataclass(frozen=True, slots=True)
class PoolRow:
    slug: str
    tier_rank: int
    sharing: str
    gpu_model: str
    card_memory_mib: int
    nodes: int


@dataclass(frozen=True, slots=True)
class FlavorRow:
    pk: int
    slug: str
    pool: str
    kind: str
    gpu_model: str
    memory_mib: int
    cores_percent: int
    mig_profile: str
    gpu_equivalent: Decimal


@dataclass(frozen=True, slots=True)
class NodeRow:
    name: str
    pool: str
    gpu_model: str
    card_memory_mib: int


@dataclass(frozen=True, slots=True)
class QuotaRow:
    team: int
    flavor: int
    guaranteed: int
    limit: int


@dataclass(frozen=True, slots=True)
class RequestRow:
    """A GpuRequest row; `allocation` is set for running work (attempt 1)."""

    pk: int
    team: int  # Team pk; the team's one project has the same pk
    flavor: int
    gpu_count: int
    kind: str
    priority: str
    is_preemptible: bool
    allow_shared_node: bool
    max_runtime_seconds: int
    created_at: datetime
    gpu_equivalent: Decimal
    allocation: AllocationRow | None = None


@dataclass(frozen=True, slots=True)
class AllocationRow:
    claims: tuple[dict[str, Any], ...]
    is_borrowed: bool
    is_preemptible: bool
    started_at: datetime


@dataclass(frozen=True, slots=True)
class Fleet:
    """Everything the database holds for one workload, as plain rows."""

    pools: tuple[PoolRow, ...]
    nodes: tuple[NodeRow, ...]
    flavors: tuple[FlavorRow, ...]
    teams: tuple[str, ...]  # slugs; team pk = position + 1
    quotas: tuple[QuotaRow, ...]
    running: tuple[RequestRow, ...]
    pending: tuple[RequestRow, ...]
    now: float
    seed: int

    @property
    def capacity_ge(self) -> float:
        return float(8 * len(self.nodes))


POOLS = (
    PoolRow("a100-training", 2, "exclusive", "A100-80G", 81_920, 700),
    PoolRow("a100-vgpu", 1, "vgpu", "A100-80G", 81_920, 500),
    PoolRow("h100-training", 3, "exclusive", "H100-80G", 81_920, 300),
    PoolRow("h100-mig", 2, "mig", "H100-80G", 81_920, 200),
    PoolRow("l4", 0, "exclusive", "L4", 24_576, 300),
)
# slug, pool, kind, memory MiB, cores %, MIG profile
FLAVORS = (
    ("a100-80g", "a100-training", "whole", 81_920, 100, ""),
    ("a100-10g", "a100-vgpu", "vgpu", 10_240, 12, ""),
    ("a100-20g", "a100-vgpu", "vgpu", 20_480, 25, ""),
    ("a100-40g", "a100-vgpu", "vgpu", 40_960, 50, ""),
    ("h100-80g", "h100-training", "whole", 81_920, 100, ""),
    ("h100-1g", "h100-mig", "mig", 10_240, 14, "1g.10gb"),
    ("h100-2g", "h100-mig", "mig", 20_480, 28, "2g.20gb"),
    ("h100-3g", "h100-mig", "mig", 40_960, 43, "3g.40gb"),
    ("l4-24g", "l4", "whole", 24_576, 100, ""),
)
WHOLE_BY_MODEL = (("a100-80g", 0.5), ("h100-80g", 0.3), ("l4-24g", 0.2))
VGPU_P = (("a100-10g", 0.5), ("a100-20g", 0.3), ("a100-40g", 0.2))
MIG_P = (("h100-1g", 0.5), ("h100-2g", 0.3), ("h100-3g", 0.2))


def gpu_equivalent_of(
    kind: str, card_memory_mib: int, memory_mib: int, cores: int, mig: str
) -> Decimal:
    """scheduling.models.gpu_equivalent_of: whole 1, MIG slices/7, vGPU max(memory, cores)."""
    if kind == "whole":
        return Decimal(1)
    if kind == "mig":
        return (Decimal(MIG_PROFILES[mig].slices) / 7).quantize(Decimal("0.0001"))
    share = max(Decimal(memory_mib) / Decimal(card_memory_mib), Decimal(cores) / 100)
    return min(Decimal(1), share).quantize(Decimal("0.0001"))


def _at(epoch: float) -> datetime:
    """A timestamp as the database stores it (microseconds, UTC)."""
    return datetime.fromtimestamp(round(epoch, 6), tz=UTC)


def _zipf(n: int, s: float) -> np.ndarray:
    w = 1.0 / np.arange(1, n + 1) ** s
    return np.asarray(w / w.sum())


def generate(
    seed: int = 7,
    scale: float = 1.0,
    pending: int = 50_000,
    teams: int = 200,
    fill: float = 0.60,
    multi_share: float = MULTI_SHARE,
) -> Fleet:
    """Draw the product-shaped W-GPU-2k (or a scaled copy) deterministically from `seed`."""
    rng = np.random.default_rng(seed)
    multi = np.random.default_rng(seed + MULTI_SEED_OFFSET)
    pools = tuple(
        PoolRow(
            p.slug,
            p.tier_rank,
            p.sharing,
            p.gpu_model,
            p.card_memory_mib,
            max(1, round(p.nodes * scale)),
        )
        for p in POOLS
    )
    pool_by_slug = {p.slug: p for p in pools}
    node_rows: list[NodeRow] = []
    for p in pools:
        prefix = p.slug
        node_rows.extend(
            NodeRow(f"{prefix}-{i:04d}", p.slug, p.gpu_model, p.card_memory_mib)
            for i in range(p.nodes)
        )
    fill_state = _Fill(node_rows)
    rows_of_pool = {
        p.slug: np.array([i for i, n in enumerate(node_rows) if n.pool == p.slug]) for p in pools
    }
    flavors = tuple(
        FlavorRow(
            pk,
            slug,
            pool,
            kind,
            pool_by_slug[pool].gpu_model,
            memory,
            cores,
            mig,
            gpu_equivalent_of(kind, pool_by_slug[pool].card_memory_mib, memory, cores, mig),
        )
        for pk, (slug, pool, kind, memory, cores, mig) in enumerate(FLAVORS, start=1)
    )
    flavor_by_slug = {f.slug: f for f in flavors}
    engine_flavor = {f.pk: _engine_flavor(f) for f in flavors}
    per_pool: dict[str, int] = defaultdict(int)
    for f in flavors:
        per_pool[f.pool] += 1

    team_slugs = tuple(f"team-{i:03d}" for i in range(teams))
    qweight = _zipf(teams, 0.8)
    demand_w = _zipf(teams, 1.1)
    quotas: list[QuotaRow] = []
    guaranteed: dict[tuple[int, int], float] = {}
    limit: dict[tuple[int, int], float] = {}
    for i in range(teams):
        for f in flavors:
            capacity = 8.0 * pool_by_slug[f.pool].nodes
            ge = float(f.gpu_equivalent)
            units = round(1.2 * capacity / per_pool[f.pool] * float(qweight[i]) / ge)
            lim = max(2, 2 * units)
            quotas.append(QuotaRow(i + 1, f.pk, units, lim))
            guaranteed[(i + 1, f.pk)] = units * ge
            limit[(i + 1, f.pk)] = lim * ge

    def draw_shape() -> tuple[FlavorRow, int, bool]:
        u = rng.random()
        if u < 0.55:
            slug = WHOLE_BY_MODEL[int(rng.choice(3, p=[p for _, p in WHOLE_BY_MODEL]))][0]
            count = int(rng.choice([1, 2, 4, 8], p=[0.70, 0.15, 0.10, 0.05]))
            return flavor_by_slug[slug], count, count < 8
        table = VGPU_P if u < 0.90 else MIG_P
        slug = table[int(rng.choice(3, p=[p for _, p in table]))][0]
        return flavor_by_slug[slug], 1, True

    def draw_runtime() -> int:
        return int(min(7 * 86_400, max(300.0, rng.lognormal(np.log(3_600), 1.5))))

    pk = 0
    running: list[RequestRow] = []
    used: dict[tuple[int, int], float] = defaultdict(float)
    used_pool: dict[str, float] = defaultdict(float)
    target = {p.slug: fill * 8 * p.nodes for p in pools}
    attempts = 0
    while any(used_pool[p] < target[p] for p in target) and attempts < 200 * len(node_rows):
        attempts += 1
        f, count, shared = draw_shape()
        if used_pool[f.pool] >= target[f.pool]:
            continue
        team = int(rng.choice(teams, p=qweight)) + 1
        ge = count * float(f.gpu_equivalent)
        key = (team, f.pk)
        if used[key] + ge > limit[key] + 1e-9:
            continue
        claims = _random_place(
            rng, fill_state, engine_flavor[f.pk], count, shared, rows_of_pool[f.pool]
        )
        if claims is None:
            continue
        borrowed = used[key] + ge > guaranteed[key] + 1e-9
        used[key] += ge
        used_pool[f.pool] += ge
        runtime = draw_runtime()
        started = NOW - float(rng.uniform(0, 0.9)) * runtime
        priority = PRIORITIES[int(rng.choice(4, p=PRIORITY_P))]
        preemptible = bool(borrowed or priority == "low" or rng.random() < 0.2)
        pk += 1
        running.append(
            RequestRow(
                pk=pk,
                team=team,
                flavor=f.pk,
                gpu_count=count,
                kind=ALL_KINDS[int(rng.integers(0, 3))],
                priority=priority,
                is_preemptible=priority == "low",
                allow_shared_node=shared,
                max_runtime_seconds=runtime,
                created_at=_at(started - 60),
                gpu_equivalent=f.gpu_equivalent * count,
                allocation=AllocationRow(
                    claims=tuple(_claim_json(c) for c in claims),
                    is_borrowed=borrowed,
                    is_preemptible=preemptible,
                    started_at=_at(started),
                ),
            )
        )

    queue: list[RequestRow] = []
    for _ in range(pending):
        f, count, shared = draw_shape()
        if f.kind != "whole" and multi.random() < multi_share:
            count = int(multi.choice(MULTI_COUNTS, p=MULTI_P))
        team = int(rng.choice(teams, p=demand_w)) + 1
        priority = PRIORITIES[int(rng.choice(4, p=PRIORITY_P))]
        pk += 1
        queue.append(
            RequestRow(
                pk=pk,
                team=team,
                flavor=f.pk,
                gpu_count=count,
                kind=ALL_KINDS[int(rng.integers(0, 3))],
                priority=priority,
                is_preemptible=priority == "low",
                allow_shared_node=shared,
                max_runtime_seconds=draw_runtime(),
                created_at=_at(NOW - float(rng.exponential(3_600))),
                gpu_equivalent=f.gpu_equivalent * count,
            )
        )
    return Fleet(
        pools=pools,
        nodes=tuple(node_rows),
        flavors=flavors,
        teams=team_slugs,
        quotas=tuple(quotas),
        running=tuple(running),
        pending=tuple(queue),
        now=NOW,
        seed=seed,
    )


class _Fill:
    """Per-card use while the starting allocations are drawn (rows of `nodes` x 8 cards)."""

    def __init__(self, nodes: list[NodeRow]) -> None:
        self.names = [n.name for n in nodes]
        self.whole = np.zeros((len(nodes), 8), dtype=bool)
        self.mem = np.zeros((len(nodes), 8), dtype=np.int64)
        self.cores = np.zeros((len(nodes), 8), dtype=np.int64)
        self.mig = np.zeros((len(nodes), 8), dtype=np.int64)
        self.total = np.array([[n.card_memory_mib] * 8 for n in nodes], dtype=np.int64)
        self.exclusive = np.zeros(len(nodes), dtype=bool)

    def free_device(self, node: int, dev: int) -> bool:
        return bool(
            not self.whole[node, dev]
            and self.mem[node, dev] == 0
            and self.cores[node, dev] == 0
            and self.mig[node, dev] == 0
        )


def _random_place(
    rng: np.random.Generator,
    fleet: _Fill,
    f: Flavor,
    count: int,
    shared: bool,
    candidates: np.ndarray,
) -> tuple[DeviceClaim, ...] | None:
    """A random feasible placement on one of `candidates` (node rows), or None after a few tries:
    an aged cluster's fragmentation."""
    for _ in range(8):
        node = int(candidates[int(rng.integers(0, len(candidates)))])
        if fleet.exclusive[node]:
            continue
        nid = fleet.names[node]
        if f.kind == "whole":
            free = [d for d in range(8) if fleet.free_device(node, d)]
            if len(free) < count or (not shared and len(free) < 8):
                continue
            if not shared:
                fleet.exclusive[node] = True
            chosen = free[:count]
            for d in chosen:
                fleet.whole[node, d] = True
            return tuple(DeviceClaim(nid, d) for d in chosen)
        if f.kind == "vgpu":
            for d in rng.permutation(8):
                d = int(d)
                if fleet.whole[node, d]:
                    continue
                if (
                    fleet.total[node, d] - fleet.mem[node, d] >= f.memory_mib
                    and 100 - fleet.cores[node, d] >= f.cores_percent
                ):
                    fleet.mem[node, d] += f.memory_mib
                    fleet.cores[node, d] += f.cores_percent
                    claim = DeviceClaim(
                        nid, d, whole=False, memory_mib=f.memory_mib, cores_percent=f.cores_percent
                    )
                    return (claim,)
            continue
        assert f.mig_profile is not None
        prof = MIG_PROFILES[f.mig_profile]
        for d in rng.permutation(8):
            d = int(d)
            if fleet.whole[node, d]:
                continue
            starts = list(prof.starts)
            rng.shuffle(starts)
            for s in starts:
                bits = ((1 << prof.slices) - 1) << s
                if not int(fleet.mig[node, d]) & bits:
                    fleet.mig[node, d] = int(fleet.mig[node, d]) | bits
                    claim = DeviceClaim(
                        nid, d, whole=False, mig_profile=prof.name, mig_start=int(s)
                    )
                    return (claim,)
    return None


def _claim_json(c: DeviceClaim) -> dict[str, Any]:
    """scheduling.selectors.snapshot.claims_as_json for one claim."""
    return {
        "node": c.node_id,
        "device_index": c.device_index,
        "whole": c.whole,
        "memory_mib": c.memory_mib,
        "cores_percent": c.cores_percent,
        "mig_profile": c.mig_profile,
        "mig_start": c.mig_start,
    }


def _engine_flavor(f: FlavorRow) -> Flavor:
    return Flavor(
        id=f.slug,
        kind=f.kind,  # type: ignore[arg-type]
        gpu_model=f.gpu_model,
        memory_mib=f.memory_mib if f.kind == "vgpu" else 0,
        cores_percent=f.cores_percent if f.kind == "vgpu" else 0,
        mig_profile=f.mig_profile if f.mig_profile in MIG_PROFILES else None,
        gpu_equivalent=float(f.gpu_equivalent),
        pools=(f.pool,),
        display_name=f.slug,  # bench.engine_db names each flavor by its slug
    )


def _taints() -> tuple[Taint, ...]:
    return (Taint(GPU_TAINT["key"], GPU_TAINT["value"], GPU_TAINT["effect"]),)


def engine_request(fleet: Fleet, r: RequestRow) -> Request:
    """scheduling.selectors.snapshot.engine_request for one row."""
    f = fleet.flavors[r.flavor - 1]
    return Request(
        id=str(r.pk),
        team=fleet.teams[r.team - 1],
        project=PROJECT_SLUG,
        owner=OWNER,
        flavor=f.slug,
        submitted_at=r.created_at.timestamp(),
        gpu_count=r.gpu_count,
        kind=r.kind,
        priority=ENGINE_PRIORITY[r.priority],
        is_preemptible=r.is_preemptible,
        allow_shared_node=r.allow_shared_node,
        pinned_model=f.gpu_model,
        vgpu_memory_mib=f.memory_mib if f.kind == "vgpu" else 0,
        vgpu_cores_percent=f.cores_percent if f.kind == "vgpu" else 0,
        mig_profile=f.mig_profile or None,
        max_runtime_seconds=float(r.max_runtime_seconds),
        pools=(f.pool,),
        distributed=r.kind == "job",
    )


def snapshot(fleet: Fleet) -> Snapshot:
    """The engine snapshot `scheduling.selectors.snapshot.build_snapshot()` reads for these rows."""
    pool_by_slug = {p.slug: p for p in fleet.pools}
    used_memory: dict[tuple[str, int], int] = defaultdict(int)
    used_cores: dict[tuple[str, int], int] = defaultdict(int)
    whole: set[tuple[str, int]] = set()
    mig_mask: dict[tuple[str, int], int] = defaultdict(int)
    for r in fleet.running:
        assert r.allocation is not None
        for claim in r.allocation.claims:
            key = (claim["node"], claim["device_index"])
            if claim.get("mig_profile") and claim.get("mig_start") is not None:
                mig_mask[key] |= mig_bits(claim["mig_profile"], claim["mig_start"])
            elif claim.get("whole"):
                whole.add(key)
            else:
                used_memory[key] += claim.get("memory_mib", 0)
                used_cores[key] += claim.get("cores_percent", 0)
    devices = tuple(
        GpuDevice(
            node_id=n.name,
            index=i,
            memory_total_mib=n.card_memory_mib,
            memory_free_mib=max(0, n.card_memory_mib - used_memory[(n.name, i)]),
            cores_free_percent=max(0, 100 - used_cores[(n.name, i)]),
            mig_capable=pool_by_slug[n.pool].sharing == "mig",
            mig_used_mask=mig_mask[(n.name, i)],
            whole_allocated=(n.name, i) in whole,
        )
        for n in fleet.nodes
        for i in range(8)
    )
    ge = {f.pk: f.gpu_equivalent for f in fleet.flavors}
    return Snapshot(
        pools=tuple(
            Pool(
                name=p.slug,
                tier=p.tier_rank,
                sharing=p.sharing,  # type: ignore[arg-type]
                scoring="binpack",
                allowed_kinds=ALL_KINDS,
                node_selector=((POOL_LABEL, p.slug),),
                taints=_taints(),
                short_reserve_fraction=0.0,
                short_max_runtime_seconds=7200.0,
                display_name=p.slug,  # bench.engine_db names each pool by its slug
            )
            for p in fleet.pools
        ),
        nodes=tuple(
            Node(
                id=n.name,
                pool=n.pool,
                gpu_model=n.gpu_model,
                labels=tuple(sorted(node_labels(n).items())),
                taints=_taints(),
                schedulable=True,
            )
            for n in fleet.nodes
        ),
        devices=devices,
        flavors=tuple(_engine_flavor(f) for f in fleet.flavors),
        teams=tuple(
            Team(name=slug, cohort="organisation", display_name=slug)
            for slug in sorted(fleet.teams)
        ),
        quotas=tuple(
            Quota(
                team=fleet.teams[q.team - 1],
                flavor=fleet.flavors[q.flavor - 1].slug,
                guaranteed=q.guaranteed * float(ge[q.flavor]),
                limit=q.limit * float(ge[q.flavor]),
                project=None,
            )
            for q in fleet.quotas
        ),
        allocations=tuple(
            Allocation(
                request_id=str(r.pk),
                team=fleet.teams[r.team - 1],
                project=PROJECT_SLUG,
                owner=OWNER,
                flavor=fleet.flavors[r.flavor - 1].slug,
                gpu_equivalents=float(r.gpu_equivalent),
                placement=tuple(
                    DeviceClaim(
                        node_id=c["node"],
                        device_index=c["device_index"],
                        whole=c.get("whole", False),
                        memory_mib=c.get("memory_mib", 0),
                        cores_percent=c.get("cores_percent", 0),
                        mig_profile=c.get("mig_profile"),
                        mig_start=c.get("mig_start"),
                    )
                    for c in r.allocation.claims
                ),
                started_at=r.allocation.started_at.timestamp(),
                max_runtime_seconds=float(r.max_runtime_seconds),
                priority=ENGINE_PRIORITY[r.priority],
                preemptible=r.allocation.is_preemptible,
                borrowed=r.allocation.is_borrowed,
                exclusive_node=not r.allow_shared_node,
            )
            for r in fleet.running
            if r.allocation is not None
        ),
        pending=tuple(engine_request(fleet, r) for r in fleet.pending),
    )


def node_labels(n: NodeRow) -> dict[str, str]:
    return {POOL_LABEL: n.pool, "nvidia.com/gpu.product": n.gpu_model}
