"""Small builders for engine tests: fleets, flavors, quotas and requests in a few lines."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from scheduling.engine.state import FleetState, Shape, shape_of
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
    vgpu_equivalent,
)

MEM = 81_920
FLAVORS: tuple[Flavor, ...] = (
    Flavor("gpu", "whole"),
    Flavor("a100", "whole", "A100-80G"),
    Flavor("v10", "vgpu", None, 10_240, 12, gpu_equivalent=vgpu_equivalent(10_240, 12, MEM)),
    Flavor("v20", "vgpu", None, 20_480, 25, gpu_equivalent=vgpu_equivalent(20_480, 25, MEM)),
    Flavor("v40", "vgpu", None, 40_960, 50, gpu_equivalent=0.5),
    Flavor("m1", "mig", None, mig_profile="1g.10gb", gpu_equivalent=1 / 7),
    Flavor("m2", "mig", None, mig_profile="2g.20gb", gpu_equivalent=2 / 7),
    Flavor("m3", "mig", None, mig_profile="3g.40gb", gpu_equivalent=3 / 7),
    Flavor("m4", "mig", None, mig_profile="4g.40gb", gpu_equivalent=4 / 7),
    Flavor("m7", "mig", None, mig_profile="7g.80gb", gpu_equivalent=1.0),
)
FLAVOR = {f.id: f for f in FLAVORS}

EXCL = Pool("excl", tier=0, sharing="exclusive")
VGPU = Pool("vgpu", tier=1, sharing="vgpu")
MIG = Pool("mig", tier=2, sharing="mig")


def devices(
    node_id: str,
    gpus: int = 8,
    mem: int = MEM,
    mig: bool = False,
    free_mem: Sequence[int] | None = None,
    free_cores: Sequence[int] | None = None,
    mig_masks: Sequence[int] | None = None,
    whole: Sequence[int] = (),
) -> list[GpuDevice]:
    out = []
    for i in range(gpus):
        out.append(
            GpuDevice(
                node_id=node_id,
                index=i,
                memory_total_mib=mem,
                memory_free_mib=free_mem[i] if free_mem is not None else mem,
                cores_free_percent=free_cores[i] if free_cores is not None else 100,
                mig_capable=mig,
                mig_used_mask=mig_masks[i] if mig_masks is not None else 0,
                whole_allocated=i in whole,
            )
        )
    return out


def fleet(
    *specs: tuple[Node, list[GpuDevice]],
    pools: Iterable[Pool] = (EXCL, VGPU, MIG),
    teams: Iterable[Team] = (),
    quotas: Iterable[Quota] | None = None,
    allocations: Iterable[Allocation] = (),
    pending: Iterable[Request] = (),
    flavors: Iterable[Flavor] = FLAVORS,
) -> Snapshot:
    pending = tuple(pending)
    allocations = tuple(allocations)
    teams = tuple(teams)
    if not teams:
        names = sorted({r.team for r in pending} | {a.team for a in allocations} | {"a"})
        teams = tuple(Team(n, cohort="c") for n in names)
    if quotas is None:
        quotas = tuple(Quota(t.name, f.id, 1000.0, 1000.0) for t in teams for f in flavors)
    devs = {(d.node_id, d.index): d for _, ds in specs for d in ds}
    for a in allocations:  # device state follows the running allocations
        for c in a.placement:
            d = devs[(c.node_id, c.device_index)]
            if c.whole:
                d = replace(d, whole_allocated=True)
            elif c.mig_profile is not None and c.mig_start is not None:
                bits = ((1 << MIG_PROFILES[c.mig_profile].slices) - 1) << c.mig_start
                d = replace(d, mig_used_mask=d.mig_used_mask | bits)
            else:
                d = replace(
                    d,
                    memory_free_mib=d.memory_free_mib - c.memory_mib,
                    cores_free_percent=d.cores_free_percent - c.cores_percent,
                )
            devs[(c.node_id, c.device_index)] = d
    return Snapshot(
        pools=tuple(pools),
        nodes=tuple(n for n, _ in specs),
        devices=tuple(devs.values()),
        flavors=tuple(flavors),
        teams=teams,
        quotas=tuple(quotas),
        allocations=allocations,
        pending=pending,
    )


def node(
    node_id: str,
    pool: str = "excl",
    model: str = "A100-80G",
    gpus: int = 8,
    labels: tuple[tuple[str, str], ...] = (),
    taints: tuple[Taint, ...] = (),
    schedulable: bool = True,
    **dev_kw: object,
) -> tuple[Node, list[GpuDevice]]:
    mig = pool == "mig"
    return (
        Node(node_id, pool, model, labels, taints, schedulable),
        devices(node_id, gpus, mig=mig, **dev_kw),  # type: ignore[arg-type]
    )


def req(rid: str, flavor: str = "gpu", team: str = "a", **kw: object) -> Request:
    base = Request(id=rid, team=team, flavor=flavor, submitted_at=0.0)
    return replace(base, **kw)  # type: ignore[arg-type]


def alloc(
    rid: str,
    claims: Sequence[DeviceClaim],
    flavor: str = "gpu",
    team: str = "a",
    ge: float | None = None,
    **kw: object,
) -> Allocation:
    f = FLAVOR[flavor]
    base = Allocation(
        request_id=rid,
        team=team,
        flavor=flavor,
        gpu_equivalents=ge if ge is not None else f.gpu_equivalent * len(claims),
        placement=tuple(claims),
        started_at=0.0,
        max_runtime_seconds=3600.0,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def whole_claims(node_id: str, indices: Iterable[int]) -> list[DeviceClaim]:
    return [DeviceClaim(node_id, i) for i in indices]


def mig_claim(node_id: str, index: int, profile: str, start: int) -> DeviceClaim:
    assert profile in MIG_PROFILES
    return DeviceClaim(node_id, index, whole=False, mig_profile=profile, mig_start=start)


def state_and_shape(snap: Snapshot, r: Request) -> tuple[FleetState, Shape]:
    st = FleetState(snap)
    return st, shape_of(r, FLAVOR[r.flavor])
