"""Host resources (CPU, memory) beside GPUs, and requests kept on one node unless distributed.

Properties over generated fleets (nodes of 1-8 cards with 8-128 CPU and 32 GiB-2 TiB) and mixed
requests (whole cards, vGPU shares, MIG instances; CPU and memory from none to more than a node
has): after a cycle, and after a second cycle whose urgent requests preempt the first cycle's
work, no node's CPU or memory and no card's share (whole, memory, cores, MIG slices) is
over-committed, and only distributed requests span nodes.  Table-driven cases pin the filter,
the reasons and the preemption of CPU holders.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from scheduling.engine.blockers import explain_waits
from scheduling.engine.planner import plan
from scheduling.engine.types import (
    MIG_PROFILES,
    Allocation,
    DeviceClaim,
    GpuDevice,
    Node,
    Plan,
    Policy,
    Priority,
    Quota,
    Request,
    Snapshot,
    Team,
)

from .builders import FLAVOR, MEM, fleet, node, req

GIB = 1024
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
Spec = tuple[Node, list[GpuDevice]]


def host_node(nid: str, cpu: int | None, mem_gib: int | None, **kw: object) -> Spec:
    """A node (builders.node) that offers `cpu` CPUs and `mem_gib` GiB to the portal's work."""
    n, devs = node(nid, **kw)  # type: ignore[arg-type]
    return (
        replace(
            n,
            cpu_millicores=None if cpu is None else cpu * 1000,
            memory_mib=None if mem_gib is None else mem_gib * GIB,
        ),
        devs,
    )


@hs.composite
def fleets(draw: hs.DrawFn) -> list[Spec]:
    specs: list[Spec] = []
    for pool in ("excl", "vgpu", "mig"):
        for i in range(draw(hs.integers(0 if pool != "excl" else 1, 4))):
            specs.append(
                host_node(
                    f"{pool}{i}",
                    draw(hs.sampled_from([8, 16, 32, 64, 96, 128])),
                    draw(hs.sampled_from([32, 128, 512, 1024, 2048])),
                    pool=pool,
                    gpus=draw(hs.sampled_from([1, 2, 4, 8])),
                )
            )
    return specs


@hs.composite
def requests(draw: hs.DrawFn, prefix: str, priority: tuple[int, int]) -> list[Request]:
    out = []
    for i in range(draw(hs.integers(1, 20))):
        flavor = draw(hs.sampled_from(["gpu", "gpu", "v10", "v20", "m1", "m3"]))
        whole = FLAVOR[flavor].kind == "whole"
        out.append(
            Request(
                id=f"{prefix}{i:02d}",
                team=draw(hs.sampled_from(["a", "b"])),
                flavor=flavor,
                submitted_at=float(i),
                gpu_count=draw(hs.sampled_from([1, 1, 2, 4, 8, 12] if whole else [1, 2, 3])),
                priority=draw(hs.integers(*priority)),
                is_preemptible=draw(hs.booleans()),
                cpu_millicores=draw(hs.sampled_from([0, 500, 4000, 16_000, 48_000, 96_000])),
                memory_mib=draw(hs.sampled_from([0, 1, 16, 128, 512, 1536])) * GIB,
                distributed=whole and draw(hs.booleans()),
                max_runtime_seconds=3600.0,
            )
        )
    return out


def running_after(snap: Snapshot, p: Plan, now: float) -> tuple[Allocation, ...]:
    """The snapshot's allocations minus the plan's victims plus its admissions."""
    victims = {x.victim_id for x in p.preemptions}
    pending = {r.id: r for r in snap.pending}
    kept = [a for a in snap.allocations if a.request_id not in victims]
    for adm in p.admissions:
        r = pending[adm.request_id]
        kept.append(
            Allocation(
                request_id=r.id,
                team=r.team,
                flavor=r.flavor,
                gpu_equivalents=r.gpu_count * FLAVOR[r.flavor].gpu_equivalent,
                placement=adm.placement,
                started_at=now,
                max_runtime_seconds=r.max_runtime_seconds,
                priority=r.priority,
                preemptible=adm.preemptible,
                borrowed=adm.borrowed,
                exclusive_node=not r.allow_shared_node,
                cpu_millicores=r.cpu_millicores,
                memory_mib=r.memory_mib,
            )
        )
    return tuple(kept)


def over_commitments(specs: list[Spec], running: tuple[Allocation, ...]) -> list[str]:
    """Every node resource and card share that `running` holds more of than there is."""
    nodes = {n.id: n for n, _ in specs}
    cpu: defaultdict[str, int] = defaultdict(int)
    mem: defaultdict[str, int] = defaultdict(int)
    whole: defaultdict[tuple[str, int], int] = defaultdict(int)
    shared_mem: defaultdict[tuple[str, int], int] = defaultdict(int)
    cores: defaultdict[tuple[str, int], int] = defaultdict(int)
    slices: defaultdict[tuple[str, int], int] = defaultdict(int)
    out: list[str] = []
    for a in running:
        for nid in dict.fromkeys(c.node_id for c in a.placement):
            cpu[nid] += a.cpu_millicores
            mem[nid] += a.memory_mib
        for c in a.placement:
            key = (c.node_id, c.device_index)
            if c.whole:
                whole[key] += 1
            elif c.mig_profile is not None and c.mig_start is not None:
                bits = ((1 << MIG_PROFILES[c.mig_profile].slices) - 1) << c.mig_start
                if slices[key] & bits:
                    out.append(f"MIG slices of {key} taken twice")
                slices[key] |= bits
            else:
                shared_mem[key] += c.memory_mib
                cores[key] += c.cores_percent
    for nid, used in cpu.items():
        have = nodes[nid].cpu_millicores
        if have is not None and used > have:
            out.append(f"{nid}: {used} millicores of {have}")
    for nid, used in mem.items():
        have = nodes[nid].memory_mib
        if have is not None and used > have:
            out.append(f"{nid}: {used} MiB of {have}")
    for key in set(whole) | set(shared_mem) | set(slices):
        if whole[key] > 1 or (whole[key] and (shared_mem[key] or slices[key])):
            out.append(f"card {key} held whole and by others")
        if shared_mem[key] > MEM or cores[key] > 100:
            out.append(f"card {key}: {shared_mem[key]} MiB, {cores[key]}% cores")
    return out


def spread_undistributed(snap: Snapshot, p: Plan) -> list[str]:
    pending = {r.id: r for r in snap.pending}
    return [
        a.request_id
        for a in p.admissions
        if len(a.node_ids) > 1 and not pending[a.request_id].distributed
    ]


TEAMS = (Team("a", "c"), Team("b", "c"))
QUOTAS = tuple(Quota(t, f, 6.0, 1000.0) for t in ("a", "b") for f in FLAVOR)


@SETTINGS
@given(fleets(), requests("r", (0, 2)))
def test_no_node_or_card_is_over_committed_after_a_cycle(
    specs: list[Spec], pending: list[Request]
) -> None:
    snap = fleet(*specs, teams=TEAMS, quotas=QUOTAS, pending=pending)
    p = plan(snap, now=0.0)
    assert over_commitments(specs, running_after(snap, p, 0.0)) == []
    assert spread_undistributed(snap, p) == []


@SETTINGS
@given(fleets(), requests("r", (0, 1)), requests("u", (3, 4)))
def test_no_node_or_card_is_over_committed_after_preempting_cycles(
    specs: list[Spec], first: list[Request], urgent: list[Request]
) -> None:
    snap = fleet(*specs, teams=TEAMS, quotas=QUOTAS, pending=first)
    p = plan(snap, now=0.0)
    running = running_after(snap, p, 0.0)
    snap2 = fleet(*specs, teams=TEAMS, quotas=QUOTAS, allocations=running, pending=urgent)
    p2 = plan(snap2, now=10.0)
    assert over_commitments(specs, running_after(snap2, p2, 10.0)) == []
    assert spread_undistributed(snap2, p2) == []


# ----------------------------------------------------------------------------- table-driven


def test_a_request_that_fits_the_gpus_but_not_the_cpu_goes_to_a_node_with_room() -> None:
    snap = fleet(
        host_node("busy-cpu", 12, 1024),
        host_node("roomy", 96, 1024),
        pending=[req("r", gpu_count=4, cpu_millicores=64_000, memory_mib=512 * GIB)],
    )
    (adm,) = plan(snap, now=0.0).admissions
    assert adm.node_ids == ("roomy",)


def test_the_reason_says_host_resources_not_gpus_are_missing() -> None:
    snap = fleet(
        host_node("n1", 12, 1024),
        host_node("n2", 8, 256),
        pending=[req("r", "a100", gpu_count=4, cpu_millicores=64_000, memory_mib=512 * GIB)],
    )
    (w,) = plan(snap, now=0.0, policy=Policy(enable_backfill=False)).waiting
    assert w.reason == (
        "waiting for a node with 64 CPU and 512 GiB free beside 4 A100-80G GPUs; "
        "the nodes with room for the GPUs have at most 12 CPU free"
    )
    blocker = explain_waits(snap, plan(snap, now=0.0, policy=Policy(enable_backfill=False)))
    assert blocker["r"].code == "host_resources"
    assert blocker["r"].detail["most_cpu_free_millicores"] == 12_000


def test_running_work_holds_its_cpu_and_memory_on_each_of_its_nodes() -> None:
    running = Allocation(
        request_id="old",
        team="a",
        flavor="gpu",
        gpu_equivalents=1.0,
        placement=(DeviceClaim("n1", 0),),
        started_at=0.0,
        max_runtime_seconds=3600.0,
        cpu_millicores=90_000,
        memory_mib=64 * GIB,
    )
    snap = fleet(
        host_node("n1", 96, 1024),
        allocations=[running],
        pending=[req("r", cpu_millicores=8000)],
    )
    p = plan(snap, now=0.0, policy=Policy(enable_backfill=False))
    assert p.admissions == () and "at most 6 CPU free" in p.waiting[0].reason


def test_nodes_that_report_no_host_resources_are_not_limited_by_them() -> None:
    snap = fleet(host_node("n1", None, None), pending=[req("r", cpu_millicores=10**9)])
    assert [a.request_id for a in plan(snap, now=0.0).admissions] == ["r"]


def test_preemption_frees_the_cpu_a_victim_holds() -> None:
    hog = Allocation(
        request_id="hog",
        team="b",
        flavor="gpu",
        gpu_equivalents=1.0,
        placement=(DeviceClaim("n1", 0),),
        started_at=0.0,
        max_runtime_seconds=3600.0,
        priority=Priority.LOW,
        preemptible=True,
        cpu_millicores=90_000,
    )
    snap = fleet(
        host_node("n1", 96, 1024),
        teams=TEAMS,
        quotas=(Quota("a", "gpu", 8.0, 8.0), Quota("b", "gpu", 0.0, 8.0)),
        allocations=[hog],
        pending=[req("r", cpu_millicores=32_000, priority=Priority.HIGH)],
    )
    p = plan(snap, now=0.0)
    assert [x.victim_id for x in p.preemptions] == ["hog"]
    assert [a.request_id for a in p.admissions] == ["r"]


def test_a_multi_card_request_is_never_split_over_nodes_unless_distributed() -> None:
    small = [host_node(f"s{i}", 64, 512, gpus=4) for i in range(3)]
    waits = plan(fleet(*small, pending=[req("r", "a100", gpu_count=8)]), now=0.0).waiting
    assert waits[0].reason.startswith("needs 8 A100-80G GPUs on one node; the largest node has 4")
    spread = plan(fleet(*small, pending=[req("r", gpu_count=8, distributed=True)]), now=0.0)
    assert len(spread.admissions[0].node_ids) == 2


def test_the_reason_gives_the_most_free_cards_on_one_node() -> None:
    snap = fleet(
        host_node("n1", 64, 512, gpus=4, whole=(0,)),
        host_node("n2", 64, 512, gpus=4, whole=(0, 1)),
        pending=[req("r", "a100", gpu_count=4)],
    )
    (w,) = plan(snap, now=0.0, policy=Policy(enable_backfill=False)).waiting
    assert w.reason == "needs 4 A100-80G GPUs on one node; the most free on one node is 3"


def test_a_gang_needs_its_host_resources_on_every_node() -> None:
    snap = fleet(
        host_node("n1", 96, 1024),
        host_node("n2", 8, 1024),
        host_node("n3", 96, 1024),
        pending=[req("g", gpu_count=16, distributed=True, cpu_millicores=32_000)],
    )
    (adm,) = plan(snap, now=0.0).admissions
    assert adm.node_ids == ("n1", "n3")


def test_host_balance_keeps_cpu_heavy_work_off_the_node_whose_cpu_it_would_exhaust() -> None:
    # Both nodes fit; on `lean` the request would leave GPUs free with no CPU beside them.
    snap = fleet(
        host_node("lean", 40, 1024),
        host_node("rich", 128, 1024),
        pending=[req("r", gpu_count=1, cpu_millicores=32_000)],
    )
    (adm,) = plan(snap, now=0.0).admissions
    assert adm.node_ids == ("rich",)
