"""Property tests over random fleets and queues (hypothesis).

Invariants: no GPU's memory, cores or MIG slices are over-allocated; no quota limit is passed
(multi-share requests charged N x the share); no non-preemptible work is preempted; a
backfilled request never delays the reserved head; the same snapshot gives the same plan
regardless of input order; multi-share vGPU/MIG requests (gpu_count N > 1) get exactly N shares
on one node (vGPU: N distinct GPUs); the incrementally kept capacity index equals a rebuild.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass, replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from scheduling.engine.planner import plan
from scheduling.engine.types import (
    MIG_PROFILES,
    Allocation,
    DeviceClaim,
    Plan,
    Policy,
    Quota,
    Request,
    Snapshot,
    Team,
)

from .builders import FLAVOR, FLAVORS, MEM, fleet, node

NOW = 10_000.0
PROFILES = list(MIG_PROFILES)
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@hs.composite
def snapshots(draw: hs.DrawFn) -> Snapshot:
    teams = [f"t{i}" for i in range(draw(hs.integers(1, 3)))]
    specs = []
    allocs: list[Allocation] = []
    n_alloc = 0

    def new_alloc(
        claim: DeviceClaim | tuple[DeviceClaim, ...], flavor: str, ge: float
    ) -> Allocation:
        nonlocal n_alloc
        n_alloc += 1
        borrowed = draw(hs.booleans())
        return Allocation(
            request_id=f"run{n_alloc}",
            team=draw(hs.sampled_from(teams)),
            flavor=flavor,
            gpu_equivalents=ge,
            placement=claim if isinstance(claim, tuple) else (claim,),
            started_at=draw(hs.floats(0, NOW)),
            max_runtime_seconds=draw(hs.floats(1, 3 * NOW)),
            priority=draw(hs.integers(0, 4)),
            preemptible=borrowed or draw(hs.booleans()),
            borrowed=borrowed,
        )

    for kind in ("excl", "vgpu", "mig"):
        for i in range(draw(hs.integers(0, 3))):
            nid = f"{kind}{i}"
            gpus = draw(hs.integers(1, 4))
            model = draw(hs.sampled_from(["A100-80G", "L4"]))
            specs.append(node(nid, pool=kind, model=model, gpus=gpus))
            # A running multi-share vGPU allocation: 10 GiB / 10% on each of GPUs 0 and 1.
            pair = kind == "vgpu" and gpus >= 2 and draw(hs.booleans())
            if pair:
                shares = tuple(
                    DeviceClaim(nid, d, whole=False, memory_mib=10_240, cores_percent=10)
                    for d in (0, 1)
                )
                allocs.append(new_alloc(shares, "v10", 2 * FLAVOR["v10"].gpu_equivalent))
            for d in range(gpus):
                use = draw(hs.integers(0, 2))
                if use == 1 and pair and d < 2:
                    use = 2
                if use == 1:
                    allocs.append(new_alloc(DeviceClaim(nid, d), "gpu", 1.0))
                elif use == 2 and kind == "vgpu":
                    left_mem, left_cores = (MEM - 10_240, 90) if pair and d < 2 else (MEM, 100)
                    for _ in range(draw(hs.integers(1, 3))):
                        mem = draw(hs.sampled_from([10_240, 20_480, 40_960]))
                        cores = draw(hs.sampled_from([10, 25, 50]))
                        if mem <= left_mem and cores <= left_cores:
                            left_mem -= mem
                            left_cores -= cores
                            claim = DeviceClaim(
                                nid, d, whole=False, memory_mib=mem, cores_percent=cores
                            )
                            allocs.append(new_alloc(claim, "v20", max(mem / MEM, cores / 100)))
                elif use == 2 and kind == "mig":
                    mask = 0
                    for _ in range(draw(hs.integers(1, 3))):
                        prof = MIG_PROFILES[draw(hs.sampled_from(PROFILES))]
                        for s in prof.starts:
                            bits = ((1 << prof.slices) - 1) << s
                            if not mask & bits:
                                mask |= bits
                                claim = DeviceClaim(
                                    nid, d, whole=False, mig_profile=prof.name, mig_start=s
                                )
                                allocs.append(new_alloc(claim, "m1", prof.slices / 7))
                                break
    flavor_ids = [f.id for f in FLAVORS]
    quotas = []
    for t in teams:
        for f in flavor_ids:
            g = draw(hs.sampled_from([0.0, 1.0, 2.0, 4.0]))
            quotas.append(Quota(t, f, g, g + draw(hs.sampled_from([0.0, 1.0, 3.0, 8.0]))))
    cohort = draw(hs.sampled_from([None, "c"]))
    pending = []
    for i in range(draw(hs.integers(0, 25))):
        flavor = draw(hs.sampled_from(flavor_ids))
        whole = FLAVOR[flavor].kind == "whole"
        pending.append(
            Request(
                id=f"r{i:02d}",
                team=draw(hs.sampled_from(teams)),
                flavor=flavor,
                submitted_at=draw(hs.floats(0, NOW)),
                gpu_count=draw(hs.sampled_from([1, 1, 2, 4, 8] if whole else [1, 1, 2, 3, 5])),
                priority=draw(hs.integers(0, 4)),
                is_preemptible=draw(hs.booleans()),
                allow_shared_node=draw(hs.booleans()) or not whole,
                pinned_model=draw(hs.sampled_from([None, None, "A100-80G", "L4"])),
                max_runtime_seconds=draw(hs.floats(10, 3 * NOW)),
            )
        )
    return fleet(
        *specs,
        teams=tuple(Team(t, cohort) for t in teams),
        quotas=tuple(quotas),
        allocations=allocs,
        pending=pending,
    )


@dataclass
class Dev:
    mem: int
    cores: int
    mask: int
    whole: bool
    total: int


def devices_at(snap: Snapshot, p: Plan, t: float | None) -> dict[tuple[str, int], Dev]:
    """Device state after the plan (t None) or at time t (ended work released)."""
    devs = {
        (d.node_id, d.index): Dev(
            d.memory_free_mib,
            d.cores_free_percent,
            d.mig_used_mask,
            d.whole_allocated,
            d.memory_total_mib,
        )
        for d in snap.devices
    }
    victims = {x.victim_id for x in p.preemptions}
    for a in snap.allocations:
        if a.request_id in victims or (t is not None and max(a.expected_end, NOW) <= t):
            for c in a.placement:
                _give(devs[(c.node_id, c.device_index)], c)
    runtime = {r.id: r.max_runtime_seconds for r in snap.pending}
    for adm in p.admissions:
        if t is not None and NOW + runtime[adm.request_id] <= t:
            continue
        for c in adm.placement:
            _take(devs[(c.node_id, c.device_index)], c)
    return devs


def _bits(c: DeviceClaim) -> int:
    if c.mig_profile is None or c.mig_start is None:
        return 0
    return ((1 << MIG_PROFILES[c.mig_profile].slices) - 1) << c.mig_start


def _give(d: Dev, c: DeviceClaim) -> None:
    if c.whole:
        d.whole = False
    else:
        d.mem += c.memory_mib
        d.cores += c.cores_percent
        d.mask &= ~_bits(c)


def _take(d: Dev, c: DeviceClaim) -> None:
    if c.whole:
        assert not d.whole and d.mask == 0 and d.mem == d.total and d.cores == 100, c
        d.whole = True
    else:
        assert not d.whole, c
        assert not d.mask & _bits(c), c
        d.mem -= c.memory_mib
        d.cores -= c.cores_percent
        d.mask |= _bits(c)
        assert d.mem >= 0 and d.cores >= 0, c


@SETTINGS
@given(snapshots())
def test_plan_never_over_allocates_memory_cores_or_mig_slices(snap: Snapshot) -> None:
    devices_at(snap, plan(snap, now=NOW), None)  # _take asserts per claim


@SETTINGS
@given(snapshots())
def test_multi_share_admissions_take_n_shares_on_one_node(snap: Snapshot) -> None:
    reqs = {r.id: r for r in snap.pending}
    for adm in plan(snap, now=NOW).admissions:
        r = reqs[adm.request_id]
        kind = FLAVOR[r.flavor].kind
        assert len(adm.placement) == r.gpu_count
        if kind == "vgpu":  # one share per GPU, all on one node
            assert len(adm.node_ids) == 1
            assert len({c.device_index for c in adm.placement}) == r.gpu_count
        elif kind == "mig":
            assert len(adm.node_ids) == 1
            assert all(c.mig_profile == FLAVOR[r.flavor].mig_profile for c in adm.placement)


@SETTINGS
@given(snapshots())
def test_capacity_index_matches_a_fresh_rebuild_after_the_cycle(snap: Snapshot) -> None:
    from scheduling.engine.index import CapacityIndex
    from scheduling.engine.planner import Scheduler

    sched = Scheduler(snap)
    sched.plan(NOW)
    fresh = CapacityIndex(sched.st)
    for key, g in sched.index.groups.items():
        f = fresh.groups[key]
        assert [set(b) for b in g.whole] == [set(b) for b in f.whole]
        assert [set(b) for b in g.vgpu] == [set(b) for b in f.vgpu]
        assert {p: [set(b) for b in bs] for p, bs in g.mig.items()} == {
            p: [set(b) for b in bs] for p, bs in f.mig.items()
        }


@SETTINGS
@given(snapshots())
def test_plan_never_pushes_a_team_past_its_quota_limit(snap: Snapshot) -> None:
    p = plan(snap, now=NOW)
    limit = {(q.team, q.flavor): q.limit for q in snap.quotas if q.project is None}
    before: defaultdict[tuple[str, str], float] = defaultdict(float)
    for a in snap.allocations:
        before[(a.team, a.flavor)] += a.gpu_equivalents
    after = defaultdict(float, before)
    victims = {x.victim_id for x in p.preemptions}
    for a in snap.allocations:
        if a.request_id in victims:
            after[(a.team, a.flavor)] -= a.gpu_equivalents
    reqs = {r.id: r for r in snap.pending}
    for adm in p.admissions:
        r = reqs[adm.request_id]
        after[(r.team, r.flavor)] += r.gpu_count * FLAVOR[r.flavor].gpu_equivalent
    for key, used in after.items():
        assert used <= max(limit.get(key, 0.0), before[key]) + 1e-6, key


@SETTINGS
@given(snapshots())
def test_plan_never_preempts_non_preemptible_work(snap: Snapshot) -> None:
    p = plan(snap, now=NOW)
    preemptible = {a.request_id: a.preemptible for a in snap.allocations}
    assert all(preemptible[x.victim_id] for x in p.preemptions)
    admitted = {a.request_id for a in p.admissions}
    assert all(x.for_request in admitted for x in p.preemptions)


@SETTINGS
@given(snapshots())
def test_backfilled_requests_never_delay_the_reserved_head(snap: Snapshot) -> None:
    p = plan(snap, now=NOW, policy=Policy(max_reservations=2))
    for res in p.reservations:
        assert res.start_at >= NOW
        at_start = devices_at(snap, p, res.start_at)
        head = next(r for r in snap.pending if r.id == res.request_id)
        assert len(res.placement) >= head.gpu_count
        if FLAVOR[head.flavor].kind != "whole":  # all shares on one node
            assert len({c.node_id for c in res.placement}) == 1
            assert len(res.placement) == head.gpu_count
        for c in res.placement:
            _take(at_start[(c.node_id, c.device_index)], c)


@SETTINGS
@given(snapshots(), hs.randoms(use_true_random=False))
def test_same_snapshot_gives_same_plan_whatever_the_input_order(
    snap: Snapshot, rnd: random.Random
) -> None:
    first = plan(snap, now=NOW)
    assert plan(snap, now=NOW) == first
    shuffled = {
        name: list(getattr(snap, name))
        for name in (
            "pools",
            "nodes",
            "devices",
            "flavors",
            "teams",
            "quotas",
            "allocations",
            "pending",
        )
    }
    for items in shuffled.values():
        rnd.shuffle(items)
    other = replace(snap, **{k: tuple(v) for k, v in shuffled.items()})
    assert plan(other, now=NOW) == first
