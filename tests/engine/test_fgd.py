"""The fragmentation-aware placer (`Policy(placer="fgd")`, scheduling/engine/fgd.py).

Table-driven choices where FGD keeps whole shapes available and best-fit does not, the
fragmentation measure itself, the mix it is taken over, and the invariants every placer keeps
(no card, node CPU or memory over-committed; same plan whatever the input order).
"""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as hs

from scheduling.engine.fgd import FragmentationMeter, WorkloadMix, queue_mix
from scheduling.engine.planner import Scheduler, plan
from scheduling.engine.state import FleetState, shape_of
from scheduling.engine.types import GpuDevice, Node, Policy, Request, Snapshot

from .builders import FLAVOR, MEM, alloc, fleet, node, req, whole_claims
from .test_host_resources import (
    QUOTAS,
    SETTINGS,
    TEAMS,
    Spec,
    fleets,
    over_commitments,
    requests,
    running_after,
)
from .test_properties import SETTINGS as PROPERTY_SETTINGS
from .test_properties import devices_at, snapshots

FGD = Policy(placer="fgd", enable_backfill=False)
BEST_FIT = Policy(placer="best_fit", enable_backfill=False)
NOW = 10_000.0


def _placed(snap: Snapshot, policy: Policy) -> dict[str, tuple[tuple[str, int], ...]]:
    p = plan(snap, now=NOW, policy=policy)
    return {
        a.request_id: tuple((c.node_id, c.device_index) for c in a.placement) for a in p.admissions
    }


def _share(rid: str, pct: int, submitted_at: float = 0.0) -> Request:
    return req(
        rid, "v20", vgpu_memory_mib=MEM * pct // 100, vgpu_cores_percent=pct,
        submitted_at=submitted_at,
    )  # fmt: skip


def test_fgd_puts_a_quarter_share_on_a_partly_used_card_not_on_a_node_an_8_card_job_needs() -> None:
    # "big" is an empty 8-card node (an 8-card job fits only there); "half" has one card with
    # half of it free. The mix is the queue: 8-card jobs and quarter shares.
    snap = fleet(
        node("big", "vgpu", gpus=8),
        node("half", "vgpu", gpus=2, free_mem=[MEM // 2, 0], free_cores=[50, 0]),
        pending=[
            _share("q", 25, submitted_at=0.0),
            *(req(f"w{i}", "gpu", gpu_count=8, submitted_at=10.0 + i) for i in range(3)),
        ],
    )
    got = _placed(snap, FGD)
    assert got["q"] == (("half", 0),)
    assert got["w0"] == tuple(("big", i) for i in range(8))


def test_fgd_leaves_a_remainder_the_mix_can_use_where_best_fit_strands_a_sliver() -> None:
    # Card "a"/0 has 30 % free, card "b"/0 50 %. A 25 % share on "a" leaves 5 % nobody in the
    # mix can use; on "b" it leaves 25 %, what the next quarter share needs.
    specs = (
        node("a", "vgpu", gpus=1, free_mem=[MEM * 30 // 100], free_cores=[30]),
        node("b", "vgpu", gpus=1, free_mem=[MEM // 2], free_cores=[50]),
    )
    pending = [_share("q", 25, submitted_at=0.0), _share("q2", 25, submitted_at=1.0)]
    snap = fleet(*specs, pending=pending[:1])
    assert _placed(snap, BEST_FIT)["q"] == (("a", 0),)
    mixed = fleet(*specs, pending=pending)
    assert _placed(mixed, FGD)["q"] == (("b", 0),)


def test_fgd_keeps_whole_cards_off_the_shared_pool_when_shares_are_in_the_mix() -> None:
    snap = fleet(
        node("excl-4", "excl", gpus=4),
        node("vgpu-2", "vgpu", gpus=2),
        pending=[
            req("w", "gpu", gpu_count=2, submitted_at=0.0),
            *(_share(f"s{i}", 50, submitted_at=1.0 + i) for i in range(4)),
        ],
    )
    assert _placed(replace(snap, pending=snap.pending[:1]), BEST_FIT)["w"][0][0] == "vgpu-2"
    got = _placed(snap, FGD)
    assert {n for n, _ in got["w"]} == {"excl-4"}
    assert len(got) == 5  # the four half shares all fit on the shared cards


def test_fgd_does_not_leave_free_cards_without_cpu_beside_them() -> None:
    # Both nodes have 6 free cards; "tight" has CPU for one 1-card pod only, after which its
    # other 5 free cards could serve nobody.
    def host(nid: str, cpu: int) -> tuple[Node, list[GpuDevice]]:
        n, devs = node(nid, "excl", gpus=8)
        return replace(n, cpu_millicores=cpu * 1000, memory_mib=1 << 30), devs

    running = [
        alloc("x1", whole_claims("a-tight", [0, 1]), cpu_millicores=8_000),
        alloc("x2", whole_claims("b-roomy", [0, 1]), cpu_millicores=8_000),
    ]
    pending = [req(f"r{i}", "gpu", cpu_millicores=4_000, submitted_at=float(i)) for i in range(2)]
    snap = fleet(host("a-tight", 12), host("b-roomy", 32), allocations=running, pending=pending)
    assert _placed(replace(snap, pending=snap.pending[:1]), BEST_FIT)["r0"][0][0] == "a-tight"
    got = _placed(snap, FGD)
    assert got["r0"][0][0] == "b-roomy"
    assert len(got) == 2


def test_fragmentation_counts_free_capacity_a_shape_cannot_use() -> None:
    snap = fleet(
        node("v", "vgpu", gpus=2, free_mem=[MEM // 10, MEM], free_cores=[10, 100]),
        node("m", "mig", model="H100-80G", gpus=1, mig_masks=[0b0000001]),
    )
    st = FleetState(snap)
    quarter = shape_of(_share("q", 25), FLAVOR["v20"])
    two_g = shape_of(req("m", "m2"), FLAVOR["m2"])
    mix = WorkloadMix()
    mix.add(quarter)
    meter = FragmentationMeter(st, mix)
    v, m = st.node_of["v"], st.node_of["m"]
    assert abs(meter.value(v) - 0.1) < 1e-9  # the 10 % sliver; the free card is usable
    assert abs(meter.value(m) - 6 / 7) < 1e-9  # vGPU shapes cannot use a MIG card at all
    mix.add(two_g, 3)  # shapes weigh by the GE they ask: 1 x 0.25 against 3 x 2/7
    w_quarter, w_two = 0.25 / (0.25 + 6 / 7), (6 / 7) / (0.25 + 6 / 7)
    # 2g starts at 0, 2, 4: slice 0 is used, so slices 1 and 6 can hold no 2g instance.
    assert abs(meter.value(m) - (w_quarter * 6 / 7 + w_two * 2 / 7)) < 1e-9
    # For whole cards, a share on the free card leaves all the node's free capacity unusable.
    cards = WorkloadMix()
    cards.add(shape_of(req("w", "gpu"), FLAVOR["gpu"]))
    by_cards = FragmentationMeter(st, cards)
    claims = ((st.node_devices[v][1], False, MEM // 4, 25, 0),)
    assert abs(by_cards.value(v) - 0.1) < 1e-9
    assert abs(by_cards.value(v, claims, quarter) - 0.85) < 1e-9


def test_the_mix_is_the_queue_plus_the_newest_running_work() -> None:
    running = [alloc(f"x{i}", whole_claims("n", [i]), started_at=float(i)) for i in range(3)]
    snap = fleet(
        node("n", "excl", gpus=8),
        allocations=running,
        pending=[_share("a", 25), _share("b", 25), req("c", "m1")],
    )
    mix = queue_mix(FleetState(snap), snap.pending)
    counts = sorted(mix.counts.values())
    assert counts == [1, 2, 3]  # one MIG request, two quarter shares, three 1-card jobs
    assert abs(sum(w for _, w in mix.classes()) - 1.0) < 1e-9


def test_requests_decided_one_at_a_time_join_the_mix() -> None:
    snap = fleet(node("n", "vgpu", gpus=2))
    sched = Scheduler(snap, FGD)
    sched.place_one(_share("a", 25), NOW)
    sched.place_one(_share("b", 50), NOW)
    assert sum(sched.placer.mix.counts.values()) == 2


# ----------------------------------------------------------------------------- invariants


@PROPERTY_SETTINGS
@given(snapshots())
def test_fgd_never_over_allocates_memory_cores_or_mig_slices(snap: Snapshot) -> None:
    devices_at(snap, plan(snap, now=NOW, policy=Policy(placer="fgd")), None)


@SETTINGS
@given(fleets(), requests("r", (0, 2)), requests("u", (3, 4)))
def test_fgd_never_over_commits_a_node_or_card(
    specs: list[Spec], first: list[Request], urgent: list[Request]
) -> None:
    fgd = Policy(placer="fgd")
    snap = fleet(*specs, teams=TEAMS, quotas=QUOTAS, pending=first)
    p = plan(snap, now=0.0, policy=fgd)
    running = running_after(snap, p, 0.0)
    assert over_commitments(specs, running) == []
    snap2 = fleet(*specs, teams=TEAMS, quotas=QUOTAS, allocations=running, pending=urgent)
    p2 = plan(snap2, now=10.0, policy=fgd)
    assert over_commitments(specs, running_after(snap2, p2, 10.0)) == []


@PROPERTY_SETTINGS
@given(snapshots(), hs.randoms(use_true_random=False))
def test_fgd_gives_the_same_plan_whatever_the_input_order(
    snap: Snapshot, rnd: random.Random
) -> None:
    fgd = Policy(placer="fgd")
    first = plan(snap, now=NOW, policy=fgd)
    fields = ("nodes", "devices", "allocations", "pending")
    shuffled = {name: list(getattr(snap, name)) for name in fields}
    for items in shuffled.values():
        rnd.shuffle(items)
    other = replace(snap, **{k: tuple(v) for k, v in shuffled.items()})
    assert plan(other, now=NOW, policy=fgd) == first
