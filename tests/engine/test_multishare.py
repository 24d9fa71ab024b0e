"""Multi-share vGPU and MIG requests (gpu_count N > 1): all N shares on one node, all or nothing.

vGPU: N distinct GPUs of one node, each with the share's memory and cores free (HAMi
`nvidia.com/gpu: N`).  MIG: N instances of the profile on one node, on one GPU or several
(`nvidia.com/mig-1g.10gb: N`).  Charged N x the flavor's GPU-equivalent.
"""

from __future__ import annotations

from typing import Any

import pytest

from scheduling.engine.filters import capacity, fit_node, max_shares
from scheduling.engine.index import CapacityIndex
from scheduling.engine.planner import Scheduler, plan
from scheduling.engine.types import DeviceClaim, Policy, Priority, Quota, Team

from .builders import FLAVOR, MEM, alloc, fleet, mig_claim, node, req, state_and_shape

NO_BACKFILL = Policy(enable_backfill=False)


def vclaim(node_id: str, index: int, mem: int, cores: int) -> DeviceClaim:
    return DeviceClaim(node_id, index, whole=False, memory_mib=mem, cores_percent=cores)


# ----------------------------------------------------------------------------- fit (table)


@pytest.mark.parametrize(
    ("free_mem", "free_cores", "count", "expected"),
    [
        # N shares land on N distinct GPUs, tightest (least free memory) first, then device id.
        ([MEM, MEM, MEM, MEM], [100] * 4, 3, [0, 1, 2]),
        ([MEM, 30_000, MEM, 25_000], [100] * 4, 2, [3, 1]),
        ([MEM, 30_000, MEM, 25_000], [100] * 4, 4, [3, 1, 0, 2]),
        # A GPU without the memory, or without the cores, does not count.
        ([MEM, 10_000, MEM, MEM], [100, 100, 10, 100], 3, None),
        ([MEM, 10_000, MEM, MEM], [100, 100, 10, 100], 2, [0, 3]),
        # Never two shares of one request on the same GPU, however much it has free.
        ([MEM, 0, 0, 0], [100, 0, 0, 0], 2, None),
        ([MEM] * 4, [100] * 4, 5, None),
    ],
)
def test_vgpu_multi_share_fit_takes_distinct_devices(
    free_mem: list[int], free_cores: list[int], count: int, expected: list[int] | None
) -> None:
    snap = fleet(node("v", pool="vgpu", gpus=4, free_mem=free_mem, free_cores=free_cores))
    st, shape = state_and_shape(snap, req("r", "v20", gpu_count=count))
    got = fit_node(st, 0, shape, count)
    if expected is None:
        assert got is None
        assert capacity(st, 0, shape) is not None
    else:
        assert got is not None and [c[0] for c in got] == expected
        assert all(c[2:4] == (20_480, 25) for c in got)
        assert capacity(st, 0, shape) is None


@pytest.mark.parametrize(
    ("flavor", "masks", "count", "expected"),
    [
        # Three 2g instances fit one empty GPU (starts 0, 2, 4).
        ("m2", [0], 3, [(0, 0), (0, 2), (0, 4)]),
        # One 2g goes to start 4, keeping slices 0-3 free for a 4g instance.
        ("m2", [0], 1, [(0, 4)]),
        ("m2", [0], 4, None),
        # Two 3g instances fill one GPU (starts 0 and 4); a third needs another GPU.
        ("m3", [0], 2, [(0, 0), (0, 4)]),
        ("m3", [0], 3, None),
        ("m3", [0, 0], 3, [(0, 0), (0, 4), (1, 4)]),
        # The partly used GPU is filled first, the free card is kept for later.
        ("m1", [0b0111111, 0], 2, [(0, 6), (1, 4)]),
        ("m1", [0b0011111, 0], 2, [(0, 5), (0, 6)]),
        ("m7", [0, 0b1, 0], 2, [(0, 0), (2, 0)]),
        ("m7", [0b1, 0b1], 1, None),
    ],
)
def test_mig_multi_instance_fit_may_share_a_gpu(
    flavor: str, masks: list[int], count: int, expected: list[tuple[int, int]] | None
) -> None:
    snap = fleet(node("h", pool="mig", model="H100-80G", gpus=len(masks), mig_masks=masks))
    st, shape = state_and_shape(snap, req("r", flavor, gpu_count=count))
    got = fit_node(st, 0, shape, count)
    if expected is None:
        assert got is None
        return
    assert got is not None
    assert [(c[0], (c[4] & -c[4]).bit_length() - 1) for c in got] == expected
    used = masks[:]
    for dev, *_, bits in got:  # the instances never overlap each other or used slices
        assert not used[dev] & bits
        used[dev] |= bits


@pytest.mark.parametrize(
    ("flavor", "gpus", "expected"),
    [("v20", 4, 4), ("v40", 2, 2), ("m1", 2, 14), ("m2", 1, 3), ("m3", 3, 6), ("m7", 2, 2)],
)
def test_max_shares_is_what_an_empty_node_could_hold(flavor: str, gpus: int, expected: int) -> None:
    pool = "vgpu" if FLAVOR[flavor].kind == "vgpu" else "mig"
    st, shape = state_and_shape(fleet(node("n", pool=pool, gpus=gpus)), req("r", flavor))
    assert max_shares(st, 0, shape) == expected


# ----------------------------------------------------------------------------- plan


def test_vgpu_multi_share_request_is_admitted_on_one_node_with_n_claims() -> None:
    snap = fleet(
        node("v1", pool="vgpu", gpus=4, free_mem=[MEM, 10_000, MEM, MEM]),
        node("v2", pool="vgpu", gpus=2),
        pending=[req("r", "v20", gpu_count=3)],
    )
    (adm,) = plan(snap, now=0.0).admissions
    assert adm.devices_by_node == (("v1", (0, 2, 3)),)
    assert all(c.memory_mib == 20_480 and c.cores_percent == 25 for c in adm.placement)
    assert all(not c.whole for c in adm.placement)


def test_vgpu_shares_are_never_split_across_nodes() -> None:
    snap = fleet(
        node("v1", pool="vgpu", gpus=2, free_mem=[MEM, 0], free_cores=[100, 0]),
        node("v2", pool="vgpu", gpus=2, free_mem=[0, MEM], free_cores=[0, 100]),
        pending=[req("r", "v20", gpu_count=2, pinned_model="A100-80G")],
    )
    (w,) = plan(snap, now=0.0, policy=NO_BACKFILL).waiting
    assert w.code == "capacity"
    assert w.reason == "no A100-80G node has 2 GPUs with 20 GiB and 25% cores free each"


def test_vgpu_request_larger_than_any_node_says_so() -> None:
    snap = fleet(
        node("l1", pool="vgpu", model="L4", gpus=4, mem=24_576),
        pending=[req("r", "v10", gpu_count=5, pinned_model="L4")],
    )
    (w,) = plan(snap, now=0.0).waiting
    assert w.code == "capacity"  # nothing to reserve: it can never fit
    assert w.reason == (
        "no L4 node has 5 GPUs with 10 GiB and 12% cores free each "
        "(the largest holds 4 such shares)"
    )
    assert plan(snap, now=0.0).reservations == ()


def test_mig_request_larger_than_any_node_says_so() -> None:
    snap = fleet(
        node("h", pool="mig", model="H100-80G", gpus=1),
        pending=[req("r", "m3", gpu_count=3)],
    )
    (w,) = plan(snap, now=0.0).waiting
    assert w.reason == "no eligible node has 3 free 3g.40gb MIG slices (the largest holds 2)"


def test_mig_multi_instance_request_gets_distinct_starts() -> None:
    snap = fleet(
        node("h", pool="mig", model="H100-80G", gpus=2, mig_masks=[0b0000011, 0]),
        pending=[req("r", "m2", gpu_count=2), req("after", "m7", submitted_at=1.0)],
    )
    p = plan(snap, now=0.0)
    by_id = {a.request_id: a for a in p.admissions}
    # Both 2g instances go to the partly used GPU (starts 2 and 4); the free GPU stays whole
    # for the 7g request.
    assert [(c.device_index, c.mig_start) for c in by_id["r"].placement] == [(0, 2), (0, 4)]
    assert [(c.device_index, c.mig_profile) for c in by_id["after"].placement] == [(1, "7g.80gb")]


def test_multi_share_request_is_charged_n_times_the_share() -> None:
    teams = (Team("a"),)
    quotas = (Quota("a", "v20", 0.5, 0.5), Quota("a", "m1", 3 / 7, 3 / 7))
    snap = fleet(
        node("v", pool="vgpu", gpus=4),
        node("h", pool="mig", model="H100-80G", gpus=1),
        teams=teams,
        quotas=quotas,
        pending=[
            req("v3", "v20", gpu_count=3, submitted_at=0.0),  # 0.75 GE > 0.5
            req("v2", "v20", gpu_count=2, submitted_at=1.0),  # 0.5 GE
            req("m4", "m1", gpu_count=4, submitted_at=2.0),  # 4/7 > 3/7
            req("m3", "m1", gpu_count=3, submitted_at=3.0),  # 3/7
            req("v1", "v20", gpu_count=1, submitted_at=4.0),  # nothing left
        ],
    )
    p = plan(snap, now=0.0, policy=NO_BACKFILL)
    assert sorted(a.request_id for a in p.admissions) == ["m3", "v2"]
    assert {w.request_id: w.code for w in p.waiting} == {
        "v3": "quota",
        "m4": "quota",
        "v1": "quota",
    }
    assert "limit" in next(w.reason for w in p.waiting if w.request_id == "v1")


def test_plugin_placer_keeps_free_cards_for_later_multi_share_requests() -> None:
    # n1: two fully free cards; n2: two partly used cards with room for a 20 GiB share each.
    snap = fleet(
        node("n1", pool="vgpu", gpus=2),
        node("n2", pool="vgpu", gpus=2, free_mem=[40_960, 40_960], free_cores=[50, 50]),
        pending=[req("r", "v20", gpu_count=2)],
    )
    (adm,) = plan(snap, now=0.0).admissions
    assert adm.node_ids == ("n2",)


def test_failed_multi_share_shape_does_not_fail_single_shares() -> None:
    snap = fleet(
        node("v", pool="vgpu", gpus=2, free_mem=[MEM, 0], free_cores=[100, 0]),
        pending=[req("two", "v20", gpu_count=2), req("one", "v20", submitted_at=1.0)],
    )
    p = plan(snap, now=0.0, policy=NO_BACKFILL)
    assert [a.request_id for a in p.admissions] == ["one"]
    assert [w.request_id for w in p.waiting] == ["two"]


def test_index_tracks_several_instances_on_one_gpu() -> None:
    snap = fleet(
        node("h", pool="mig", model="H100-80G", gpus=1),
        pending=[
            req("r", "m3", gpu_count=2, submitted_at=0.0),  # slices 0-2 and 4-6
            req("one", "m1", submitted_at=1.0),  # slice 3 is the only one left
            req("more", "m1", submitted_at=2.0),
        ],
    )
    sched = Scheduler(snap, NO_BACKFILL)
    p = sched.plan(0.0)
    assert [(a.request_id, [c.mig_start for c in a.placement]) for a in p.admissions] == [
        ("r", [0, 4]),
        ("one", [3]),
    ]
    assert sched.st.mig_mask == [0b1111111]
    (g,) = [g for g in sched.index.groups.values() if g.pool.name == "mig"]
    assert all(not b for buckets in g.mig.values() for b in buckets)


def test_place_one_admits_a_multi_share_arrival() -> None:
    snap = fleet(node("v", pool="vgpu", gpus=2))
    d = Scheduler(snap).place_one(req("r", "v40", gpu_count=2), now=0.0)
    assert d.admission is not None and d.admission.devices_by_node == (("v", (0, 1)),)
    again = Scheduler(snap).place_one(req("r", "v40", gpu_count=3), now=0.0)
    assert again.admission is None and again.code == "capacity"


def test_best_fit_places_multi_share_requests_too() -> None:
    snap = fleet(
        node("v1", pool="vgpu", gpus=2),
        node("v2", pool="vgpu", gpus=2, free_mem=[40_960, 40_960], free_cores=[50, 50]),
        node("h", pool="mig", model="H100-80G", gpus=1),
        pending=[req("v", "v20", gpu_count=2), req("m", "m2", gpu_count=3, submitted_at=1.0)],
    )
    p = plan(snap, now=0.0, policy=Policy(placer="best_fit"))
    by_id = {a.request_id: a for a in p.admissions}
    assert by_id["v"].node_ids == ("v2",)
    assert [c.mig_start for c in by_id["m"].placement] == [0, 2, 4]  # first legal starts


# ----------------------------------------------------------------------------- preemption


def test_preemption_frees_all_shares_on_one_node() -> None:
    teams = (Team("a", "c"), Team("v", "c"))
    quotas = (Quota("a", "v40", 4, 4), Quota("v", "v40", 0, 4))
    low: dict[str, Any] = {
        "team": "v",
        "flavor": "v40",
        "priority": Priority.LOW,
        "preemptible": True,
    }
    snap = fleet(
        node("n1", pool="vgpu", gpus=2),
        node("n2", pool="vgpu", gpus=2),
        teams=teams,
        quotas=quotas,
        allocations=[
            # n1: card 1 blocked by one victim; n2: both cards blocked by one victim each.
            alloc("x", [vclaim("n1", 1, MEM, 100)], ge=1.0, **low),
            alloc("y", [vclaim("n2", 0, MEM, 100)], ge=1.0, **low),
            alloc("z", [vclaim("n2", 1, MEM, 100)], ge=1.0, **low),
            alloc("keep", [vclaim("n1", 0, 61_440, 75)], ge=0.75, team="v", flavor="v40"),
        ],
        pending=[req("r", "v40", gpu_count=2, priority=Priority.HIGH)],
    )
    p = plan(snap, now=0.0)
    (adm,) = p.admissions
    # n1 cannot host both shares even without x ("keep" is not preemptible): n2, two victims.
    assert adm.devices_by_node == (("n2", (0, 1)),)
    assert sorted(x.victim_id for x in p.preemptions) == ["y", "z"]


def test_preemption_for_mig_instances_takes_the_minimal_set() -> None:
    teams = (Team("a", "c"), Team("v", "c"))
    quotas = (Quota("a", "m3", 4, 4), Quota("v", "m1", 0, 4))
    low: dict[str, Any] = {
        "team": "v",
        "flavor": "m1",
        "priority": Priority.LOW,
        "preemptible": True,
    }
    snap = fleet(
        node("h", pool="mig", model="H100-80G", gpus=1),
        teams=teams,
        quotas=quotas,
        allocations=[
            alloc("s1", [mig_claim("h", 0, "1g.10gb", 1)], started_at=1.0, **low),
            alloc("s5", [mig_claim("h", 0, "1g.10gb", 5)], started_at=2.0, **low),
        ],
        pending=[req("r", "m3", gpu_count=2, priority=Priority.HIGH)],
    )
    p = plan(snap, now=0.0)
    (adm,) = p.admissions
    assert [c.mig_start for c in adm.placement] == [0, 4]
    assert sorted(x.victim_id for x in p.preemptions) == ["s1", "s5"]


# ----------------------------------------------------------------------------- backfill


def test_multi_share_head_reserves_n_devices_on_one_node() -> None:
    # Cards 0-2 busy until 500 / 900 / 2000, card 3 free: the 3-share head starts at 900.
    snap = fleet(
        node("v", pool="vgpu", gpus=4),
        allocations=[
            alloc("a500", [vclaim("v", 0, MEM, 100)], "v40", max_runtime_seconds=500),
            alloc("a900", [vclaim("v", 1, MEM, 100)], "v40", max_runtime_seconds=900),
            alloc("a2000", [vclaim("v", 2, MEM, 100)], "v40", max_runtime_seconds=2000),
        ],
        pending=[
            req("head", "v40", gpu_count=3, priority=Priority.HIGH),
            req("short", "v10", max_runtime_seconds=100, submitted_at=1.0),
            req("long", "v10", max_runtime_seconds=5000, submitted_at=2.0),
        ],
    )
    p = plan(snap, now=0.0)
    (res,) = p.reservations
    assert res.start_at == 900.0
    assert sorted(c.device_index for c in res.placement) == [0, 1, 3]
    assert {w.request_id: w.code for w in p.waiting} == {"head": "reserved", "long": "reservation"}
    (adm,) = p.admissions
    assert adm.request_id == "short"  # ends before the head starts: may use a reserved card


def test_index_matches_a_fresh_rebuild_after_multi_share_admissions() -> None:
    snap = fleet(
        node("v", pool="vgpu", gpus=4),
        node("h", pool="mig", model="H100-80G", gpus=2),
        pending=[
            req("a", "v20", gpu_count=3),
            req("b", "m2", gpu_count=4, submitted_at=1.0),
            req("c", "v10", gpu_count=2, submitted_at=2.0),
        ],
    )
    sched = Scheduler(snap)
    assert len(sched.plan(0.0).admissions) == 3
    fresh = CapacityIndex(sched.st)
    for key, g in sched.index.groups.items():
        f = fresh.groups[key]
        assert [set(b) for b in g.whole] == [set(b) for b in f.whole]
        assert [set(b) for b in g.vgpu] == [set(b) for b in f.vgpu]
        assert {p: [set(b) for b in bs] for p, bs in g.mig.items()} == {
            p: [set(b) for b in bs] for p, bs in f.mig.items()
        }


def test_a_multi_share_victim_frees_every_share_it_holds() -> None:
    teams = (Team("a", "c"), Team("v", "c"))
    quotas = (Quota("a", "v40", 4, 4), Quota("v", "v40", 0, 4))
    pair = alloc(
        "pair",
        [vclaim("n", 0, MEM, 100), vclaim("n", 1, MEM, 100)],
        "v40",
        team="v",
        priority=Priority.LOW,
        preemptible=True,
        ge=2.0,
    )
    snap = fleet(
        node("n", pool="vgpu", gpus=2),
        teams=teams,
        quotas=quotas,
        allocations=[pair],
        pending=[req("r", "v40", gpu_count=2, priority=Priority.HIGH)],
    )
    sched = Scheduler(snap)
    p = sched.plan(0.0)
    assert [x.victim_id for x in p.preemptions] == ["pair"]
    (adm,) = p.admissions
    assert adm.devices_by_node == (("n", (0, 1)),)
    assert sched.st.mem_free == [MEM - 40_960, MEM - 40_960]
    assert sched.st.cores_free == [50, 50]


def test_spread_pool_spreads_multi_share_requests_onto_the_emptier_node() -> None:
    from scheduling.engine.types import Pool

    spread = Pool("vgpu", sharing="vgpu", scoring="spread")
    snap = fleet(
        node("busy", pool="vgpu", gpus=2, free_mem=[40_960, 40_960], free_cores=[50, 50]),
        node("empty", pool="vgpu", gpus=2),
        pools=(spread,),
        pending=[req("r", "v20", gpu_count=2)],
    )
    (adm,) = plan(snap, now=0.0).admissions
    assert adm.node_ids == ("empty",)
