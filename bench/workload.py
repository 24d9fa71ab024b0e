"""Seeded synthetic fleet and queue for the scheduling-engine benchmark (W-GPU-2k).

Shaped after public GPU-cluster traces (Philly, Helios, Alibaba PAI): most requests are whole
cards, mostly single-GPU with some 2/4/8; a third of the rest are GPU shares; MIG slices are a
minority; team volume is Zipf-distributed and runtimes are heavy-tailed (log-normal).

Fleet W-GPU-2k (scale=1.0):
  * 1,200 A100-80G nodes x 8 GPUs, vGPU pool "a100-vgpu" (tier 1)
  * 500 H100-80G nodes x 8 GPUs, MIG pool "h100-mig" (tier 2)
  * 300 L4 nodes x 8 GPUs, exclusive pool "l4" (tier 0)
  * 200 teams in 10 cohorts, guaranteed quotas summing to 1.2x capacity, limits 2x guaranteed
  * 5 priority classes, 50,000 pending requests, the fleet ~60% full at the start.
  * 1% of the pending vGPU/MIG requests ask for 2-4 shares on one node (`multi_share`);
    running work and the rest of the queue are the same as with `multi_share=0`.

Everything is drawn from `numpy.random.default_rng(seed)`, so a seed names one workload.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scheduling.engine import (
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
    Team,
    vgpu_equivalent,
)

NOW = 1_800_000_000.0
A100_MEM = 81_920
H100_MEM = 81_920
L4_MEM = 24_576
MODELS = ("A100-80G", "H100-80G", "L4")

VGPU_FLAVORS = (("a100-10g", 10_240, 12), ("a100-20g", 20_480, 25), ("a100-40g", 40_960, 50))
MIG_FLAVORS = (("h100-1g", "1g.10gb"), ("h100-2g", "2g.20gb"), ("h100-3g", "3g.40gb"))
KINDS = ("training", "inference", "notebook", "batch")
#: Share of pending vGPU/MIG requests that ask for several shares (HAMi `nvidia.com/gpu: N`,
#: `nvidia.com/mig-1g.10gb: N`), and how many; drawn from a generator of its own.
MULTI_SHARE = 0.01
MULTI_COUNTS = (2, 3, 4)
MULTI_P = (0.6, 0.25, 0.15)
MULTI_SEED_OFFSET = 7919


@dataclass(frozen=True, slots=True)
class Workload:
    snapshot: Snapshot
    now: float
    capacity_ge: float
    seed: int
    multi_share: float = MULTI_SHARE


def flavors() -> tuple[Flavor, ...]:
    out = [Flavor("gpu", "whole", None, gpu_equivalent=1.0)]
    for fid, mem, cores in VGPU_FLAVORS:
        out.append(
            Flavor(
                fid,
                "vgpu",
                "A100-80G",
                memory_mib=mem,
                cores_percent=cores,
                gpu_equivalent=vgpu_equivalent(mem, cores, A100_MEM),
            )
        )
    for fid, prof in MIG_FLAVORS:
        out.append(
            Flavor(
                fid,
                "mig",
                "H100-80G",
                mig_profile=prof,
                gpu_equivalent=MIG_PROFILES[prof].gpu_equivalent,
            )
        )
    return tuple(out)


def _zipf_weights(n: int, s: float) -> np.ndarray:
    w = 1.0 / np.arange(1, n + 1) ** s
    return np.asarray(w / w.sum())


class _Fill:
    """Mutable device state used only while generating the starting allocations."""

    def __init__(
        self, n_a100: int, n_h100: int, n_l4: int, nodes: list[tuple[str, str, str]] | None = None
    ) -> None:
        self.nodes: list[tuple[str, str, str]] = []  # (id, pool, model)
        for i in range(n_a100):
            self.nodes.append((f"a100-{i:04d}", "a100-vgpu", "A100-80G"))
        for i in range(n_h100):
            self.nodes.append((f"h100-{i:04d}", "h100-mig", "H100-80G"))
        for i in range(n_l4):
            self.nodes.append((f"l4-{i:04d}", "l4", "L4"))
        self.nodes.extend(nodes or ())
        n = len(self.nodes)
        self.whole = np.zeros((n, 8), dtype=bool)
        self.mem = np.zeros((n, 8), dtype=np.int64)
        self.cores = np.zeros((n, 8), dtype=np.int64)
        self.mig = np.zeros((n, 8), dtype=np.int64)
        self.total = np.array(
            [
                [A100_MEM if m == "A100-80G" else H100_MEM if m == "H100-80G" else L4_MEM] * 8
                for _, _, m in self.nodes
            ],
            dtype=np.int64,
        )
        self.by_model: dict[str, np.ndarray] = {
            m: np.array([i for i, x in enumerate(self.nodes) if x[2] == m]) for m in MODELS
        }
        self.exclusive = np.zeros(n, dtype=bool)

    def free_device(self, node: int, dev: int) -> bool:
        return bool(
            not self.whole[node, dev]
            and self.mem[node, dev] == 0
            and self.cores[node, dev] == 0
            and self.mig[node, dev] == 0
        )


def generate(
    seed: int = 7,
    scale: float = 1.0,
    pending: int = 50_000,
    teams: int = 200,
    fill: float = 0.60,
    multi_share: float = MULTI_SHARE,
) -> Workload:
    """Build the W-GPU-2k snapshot (or a scaled copy) deterministically from `seed`.

    `multi_share` is the fraction of pending vGPU/MIG requests asking for several shares
    (gpu_count 2/3/4); it is drawn from a separate generator, so 0.0 gives exactly the
    single-share workload of earlier versions and any value leaves everything else unchanged.
    """
    rng = np.random.default_rng(seed)
    multi = np.random.default_rng(seed + MULTI_SEED_OFFSET)
    n_a100, n_h100, n_l4 = (max(1, round(x * scale)) for x in (1200, 500, 300))
    fleet = _Fill(n_a100, n_h100, n_l4)
    capacity = float(8 * len(fleet.nodes))
    flav = flavors()
    flav_by_id = {f.id: f for f in flav}

    # Teams, cohorts, quotas: quota weight is a flattened Zipf, demand a steeper one.
    team_names = [f"team-{i:03d}" for i in range(teams)]
    qweight = _zipf_weights(teams, 0.8)
    demand_w = _zipf_weights(teams, 1.1)
    team_objs = tuple(Team(t, cohort=f"cohort-{i % 10}") for i, t in enumerate(team_names))
    mix = {"gpu": 0.55}
    for fid, _, _ in VGPU_FLAVORS:
        mix[fid] = 0.35 / len(VGPU_FLAVORS)
    for fid, _ in MIG_FLAVORS:
        mix[fid] = 0.10 / len(MIG_FLAVORS)
    quotas: list[Quota] = []
    guaranteed: dict[tuple[str, str], float] = {}
    limit: dict[tuple[str, str], float] = {}
    for i, t in enumerate(team_names):
        for fid, share in mix.items():
            g = round(1.2 * capacity * share * float(qweight[i]), 2)
            lim = max(2.0, round(2 * g, 2))
            quotas.append(Quota(t, fid, g, lim))
            guaranteed[(t, fid)] = g
            limit[(t, fid)] = lim

    def draw_request_shape() -> tuple[str, int, str | None, bool]:
        u = rng.random()
        if u < 0.55:
            count = int(rng.choice([1, 2, 4, 8], p=[0.70, 0.15, 0.10, 0.05]))
            pinned = str(rng.choice(MODELS, p=[0.5, 0.3, 0.2])) if rng.random() < 1 / 3 else None
            return "gpu", count, pinned, count < 8
        if u < 0.90:
            fid = VGPU_FLAVORS[int(rng.choice(3, p=[0.5, 0.3, 0.2]))][0]
            return fid, 1, None, True
        fid = MIG_FLAVORS[int(rng.choice(3, p=[0.5, 0.3, 0.2]))][0]
        return fid, 1, None, True

    def draw_runtime() -> float:
        return float(min(7 * 86_400, max(300.0, rng.lognormal(np.log(3_600), 1.5))))

    priorities = np.array([0, 1, 2, 3, 4])
    prio_p = [0.15, 0.20, 0.40, 0.20, 0.05]

    # ---------------------------------------------------------------- starting allocations
    used: dict[tuple[str, str], float] = {}
    allocations: list[Allocation] = []
    used_ge = 0.0
    target = fill * capacity
    attempts = 0
    while used_ge < target and attempts < 20 * int(capacity):
        attempts += 1
        fid, count, pinned, shared = draw_request_shape()
        ti = int(rng.choice(teams, p=qweight))
        team = team_names[ti]
        f = flav_by_id[fid]
        ge = count * f.gpu_equivalent
        key = (team, fid)
        if used.get(key, 0.0) + ge > limit[key] + 1e-9:
            continue
        claims = _random_place(rng, fleet, f, count, pinned, shared)
        if claims is None:
            continue
        borrowed = used.get(key, 0.0) + ge > guaranteed[key] + 1e-9
        used[key] = used.get(key, 0.0) + ge
        used_ge += ge
        runtime = draw_runtime()
        started = NOW - float(rng.uniform(0, 0.9)) * runtime
        prio = int(rng.choice(priorities, p=prio_p))
        allocations.append(
            Allocation(
                request_id=f"run-{len(allocations):06d}",
                team=team,
                flavor=fid,
                gpu_equivalents=ge,
                placement=claims,
                started_at=started,
                max_runtime_seconds=runtime,
                priority=prio,
                preemptible=borrowed or prio <= 1 or rng.random() < 0.2,
                borrowed=borrowed,
                exclusive_node=not shared,
            )
        )

    # ---------------------------------------------------------------- pending queue
    reqs: list[Request] = []
    for i in range(pending):
        fid, count, pinned, shared = draw_request_shape()
        if fid != "gpu" and multi.random() < multi_share:
            count = int(multi.choice(MULTI_COUNTS, p=MULTI_P))
        team = team_names[int(rng.choice(teams, p=demand_w))]
        prio = int(rng.choice(priorities, p=prio_p))
        reqs.append(
            Request(
                id=f"req-{i:06d}",
                team=team,
                flavor=fid,
                submitted_at=NOW - float(rng.exponential(3_600)),
                gpu_count=count,
                kind=KINDS[int(rng.integers(0, len(KINDS)))],
                priority=prio,
                is_preemptible=prio <= 1,
                allow_shared_node=shared,
                pinned_model=pinned,
                max_runtime_seconds=draw_runtime(),
            )
        )

    pools = (
        Pool("a100-vgpu", tier=1, sharing="vgpu", scoring="binpack"),
        Pool("h100-mig", tier=2, sharing="mig", scoring="binpack"),
        Pool("l4", tier=0, sharing="exclusive", scoring="binpack"),
    )
    nodes = tuple(Node(nid, pool, model) for nid, pool, model in fleet.nodes)
    devices: list[GpuDevice] = []
    for ni, (nid, pool, _model) in enumerate(fleet.nodes):
        for d in range(8):
            total = int(fleet.total[ni, d])
            devices.append(
                GpuDevice(
                    node_id=nid,
                    index=d,
                    memory_total_mib=total,
                    memory_free_mib=total - int(fleet.mem[ni, d]),
                    cores_free_percent=100 - int(fleet.cores[ni, d]),
                    mig_capable=pool == "h100-mig",
                    mig_used_mask=int(fleet.mig[ni, d]),
                    whole_allocated=bool(fleet.whole[ni, d]),
                )
            )
    snap = Snapshot(
        pools=pools,
        nodes=nodes,
        devices=tuple(devices),
        flavors=flav,
        teams=team_objs,
        quotas=tuple(quotas),
        allocations=tuple(allocations),
        pending=tuple(reqs),
    )
    return Workload(snap, NOW, capacity, seed, multi_share)


def _random_place(
    rng: np.random.Generator,
    fleet: _Fill,
    f: Flavor,
    count: int,
    pinned: str | None,
    shared: bool,
    candidates: np.ndarray | None = None,
) -> tuple[DeviceClaim, ...] | None:
    """Random feasible placement (aged-cluster fragmentation), or None after a few tries.

    `candidates` (node rows) restricts the placement to one pool, as the product does.
    """
    for _ in range(8):
        if candidates is not None:
            cand = candidates
        else:
            if f.kind == "whole":
                model = pinned or str(rng.choice(MODELS, p=[0.6, 0.25, 0.15]))
            else:
                model = f.gpu_model or "A100-80G"
            cand = fleet.by_model[model]
        node = int(cand[int(rng.integers(0, len(cand)))])
        if fleet.exclusive[node]:
            continue
        nid = fleet.nodes[node][0]
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
                    return (
                        DeviceClaim(
                            nid,
                            d,
                            whole=False,
                            memory_mib=f.memory_mib,
                            cores_percent=f.cores_percent,
                        ),
                    )
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
                    return (
                        DeviceClaim(nid, d, whole=False, mig_profile=prof.name, mig_start=int(s)),
                    )
    return None
