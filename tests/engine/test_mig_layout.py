"""A MIG card offers the instances of its layout, not seven free slices: the engine never admits
more instances of a profile on a GPU than the layout has, nor one of a profile it lacks."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.engine.planner import plan
from scheduling.engine.types import GpuDevice, Node, Snapshot, mig_layout_starts
from tests.engine.builders import alloc, fleet, mig_claim, node, req

# The demo's H100 node: four cards of 7 x 1g.10gb and four of 2 x 3g.40gb (28 + 8 instances).
Layout = tuple[tuple[str, int], ...]
ONE_G: Layout = (("1g.10gb", 7),)
THREE_G: Layout = (("3g.40gb", 2),)
DEMO_LAYOUTS = [ONE_G] * 4 + [THREE_G] * 4
PROFILE_FLAVOR = {
    "1g.10gb": "m1",
    "2g.20gb": "m2",
    "3g.40gb": "m3",
    "4g.40gb": "m4",
    "7g.80gb": "m7",
}


def laid_out(node_id: str, layouts: list[Layout]) -> tuple[Node, list[GpuDevice]]:
    """A MIG node whose cards carry `layouts`, one per card."""
    n, devices = node(node_id, pool="mig", model="H100-80G", gpus=len(layouts))
    return n, [replace(d, mig_layout=layouts[d.index]) for d in devices]


def admitted_per_card(snap: Snapshot) -> Counter[tuple[str, int, str]]:
    """(node, card, profile) → instances held: running work plus this cycle's admissions."""
    held: Counter[tuple[str, int, str]] = Counter()
    placements = [a.placement for a in snap.allocations]
    placements += [a.placement for a in plan(snap, now=0.0).admissions]
    for placement in placements:
        for claim in placement:
            assert claim.mig_profile is not None
            held[(claim.node_id, claim.device_index, claim.mig_profile)] += 1
    return held


def test_layout_starts_lay_out_large_profiles_first() -> None:
    assert mig_layout_starts((("1g.10gb", 4), ("3g.40gb", 1))) == {
        "3g.40gb": (0,),
        "1g.10gb": (3, 4, 5, 6),
    }
    assert mig_layout_starts((("3g.40gb", 2),)) == {"3g.40gb": (0, 4)}
    # More than seven slices: what does not fit is not on the card.
    assert mig_layout_starts((("1g.10gb", 7), ("3g.40gb", 2))) == {
        "3g.40gb": (0, 4),
        "1g.10gb": (3,),
    }
    assert mig_layout_starts((("9g.99gb", 1),)) == {}


def test_demo_h100_admits_28_1g_instances_not_56() -> None:
    pending = [req(f"r{i}", "m1", submitted_at=float(i)) for i in range(60)]
    snap = fleet(laid_out("h100-mig-1", DEMO_LAYOUTS), pending=pending)
    admissions = plan(snap, now=0.0).admissions
    assert len(admissions) == 28
    cards = Counter(c.device_index for a in admissions for c in a.placement)
    assert cards == {0: 7, 1: 7, 2: 7, 3: 7}


def test_demo_h100_admits_8_3g_instances_on_the_3g_cards_only() -> None:
    pending = [req(f"r{i}", "m3", submitted_at=float(i)) for i in range(12)]
    snap = fleet(laid_out("h100-mig-1", DEMO_LAYOUTS), pending=pending)
    admissions = plan(snap, now=0.0).admissions
    assert len(admissions) == 8
    assert {c.device_index for a in admissions for c in a.placement} == {4, 5, 6, 7}


def test_a_card_without_a_layout_keeps_any_legal_placement() -> None:
    pending = [req(f"r{i}", "m1", submitted_at=float(i)) for i in range(10)]
    snap = fleet(node("m", pool="mig", gpus=1), pending=pending)
    assert len(plan(snap, now=0.0).admissions) == 7


def test_multi_instance_request_fits_only_within_the_layout() -> None:
    snap = fleet(
        laid_out("h", [(("1g.10gb", 2), ("3g.40gb", 1))]),
        pending=[req("big", "m1", gpu_count=3), req("ok", "m1", gpu_count=2, submitted_at=1.0)],
    )
    result = plan(snap, now=0.0)
    assert [a.request_id for a in result.admissions] == ["ok"]
    assert {c.mig_start for c in result.admissions[0].placement} == {3, 4}


layouts = st.lists(
    st.lists(
        st.tuples(st.sampled_from(sorted(PROFILE_FLAVOR)), st.integers(min_value=1, max_value=7)),
        min_size=1,
        max_size=3,
        unique_by=lambda item: item[0],
    ).map(tuple),
    min_size=1,
    max_size=4,
)


@st.composite
def mig_fleets(draw: st.DrawFn) -> Snapshot:
    """One or two MIG nodes with random layouts, some instances already running, a queue of
    MIG requests of every profile (some asking for several instances)."""
    specs = [laid_out(f"n{i}", draw(layouts)) for i in range(draw(st.integers(1, 2)))]
    running = []
    for n, devices in specs:
        for d in devices:
            for profile, starts in mig_layout_starts(d.mig_layout).items():
                for s in starts:
                    if draw(st.booleans()):
                        rid = f"run-{n.id}-{d.index}-{s}"
                        claim = mig_claim(n.id, d.index, profile, s)
                        running.append(alloc(rid, [claim], flavor=PROFILE_FLAVOR[profile]))
                        break
    pending = [
        req(
            f"p{i}",
            PROFILE_FLAVOR[draw(st.sampled_from(sorted(PROFILE_FLAVOR)))],
            gpu_count=draw(st.integers(1, 3)),
            submitted_at=float(i),
        )
        for i in range(draw(st.integers(1, 25)))
    ]
    return fleet(*specs, allocations=running, pending=pending)


@settings(max_examples=150, deadline=None)
@given(mig_fleets())
def test_admitted_instances_never_exceed_the_layout(snap: Snapshot) -> None:
    layout_of = {(d.node_id, d.index): dict(d.mig_layout) for d in snap.devices}
    starts_of = {(d.node_id, d.index): mig_layout_starts(d.mig_layout) for d in snap.devices}
    for (node_id, card, profile), count in admitted_per_card(snap).items():
        offered = len(starts_of[(node_id, card)].get(profile, ()))
        assert count <= offered <= layout_of[(node_id, card)].get(profile, 0)
    for admission in plan(snap, now=0.0).admissions:
        for claim in admission.placement:
            assert claim.mig_profile is not None
            starts = starts_of[(claim.node_id, claim.device_index)][claim.mig_profile]
            assert claim.mig_start in starts
