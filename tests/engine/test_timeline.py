"""Backfill reservations from the availability timeline equal the dry-run definition.

The reference below is the reservation as backfill.py defines it (steps 1-2 of its docstring),
computed the plain way: on every eligible node, release the running work one by one in order of
(max(expected end, now), id) until the head's part fits, then put it back.  `reserve` orders the
nodes by their timeline bound and dry-runs only where it can matter; on random fleets (whole,
vGPU and MIG nodes, overdue and exclusive work, host CPU and memory, gangs, reserved devices)
both must give the same start and the same devices, and the bound is never later than the start.
"""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from scheduling.engine.backfill import _STATIC, Hold, earliest_bound, earliest_fit, reserve
from scheduling.engine.filters import fit_node, max_shares
from scheduling.engine.index import Group
from scheduling.engine.planner import Scheduler
from scheduling.engine.state import (
    AllocRecord,
    Claim,
    FleetState,
    Shape,
    gang_layout,
    is_gang,
    shape_of,
)
from scheduling.engine.types import MIG_PROFILES, Allocation, DeviceClaim, Request, Snapshot

from .builders import FLAVOR, MEM, alloc, fleet, mig_claim, node, req, whole_claims

NOW = 10_000.0
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def reference_fit(
    st: FleetState, node: int, shape: Shape, count: int, now: float, blocked: frozenset[int]
) -> tuple[float, tuple[Claim, ...]] | None:
    """Earliest time the head's part fits on `node`, by releasing work in order (dry run)."""
    recs = sorted(
        (st.allocs[rid] for rid in st.node_allocs[node]), key=lambda r: (max(r.end, now), r.id)
    )
    released: list[AllocRecord] = []
    found: tuple[float, tuple[Claim, ...]] | None = None
    t = now
    claims = fit_node(st, node, shape, count, blocked)
    if claims is None or st.node_exclusive[node]:
        claims = None
        for rec in recs:
            st.release(rec, notify=False)
            released.append(rec)
            t = max(rec.end, now)
            if not st.node_exclusive[node]:
                claims = fit_node(st, node, shape, count, blocked)
                if claims is not None:
                    break
    if claims is not None:
        if not shape.allow_shared_node:
            claims = tuple((d, True, 0, 0, 0) for d in st.node_devices[node])
        found = (t, claims)
    for rec in reversed(released):
        st.apply(rec, notify=False)
    return found


def reference_reserve(
    st: FleetState,
    request_id: str,
    shape: Shape,
    groups: list[Group],
    now: float,
    blocked: frozenset[int],
) -> Hold | None:
    """The reservation with a dry run on every eligible node."""
    if not groups:
        return None
    gang = is_gang(shape, min(g.max_devices for g in groups))
    best: tuple[float, tuple[Claim, ...]] | None = None
    for g in groups:
        layout = gang_layout(shape.gpu_count, g.max_devices) if gang else None
        if gang and layout is None:
            continue
        count = layout[1] if layout is not None else shape.gpu_count
        if count == 0:
            continue
        options: list[tuple[float, int, tuple[Claim, ...]]] = []
        for n in g.nodes:
            if shape.kind == "whole":
                if len(st.node_devices[n]) < count:
                    continue
            elif count > 1 and max_shares(st, n, shape) < count:
                continue
            if any(f(st, n, shape) is not None for f in _STATIC):
                continue
            got = reference_fit(st, n, shape, count, now, blocked)
            if got is not None:
                options.append((got[0], n, got[1]))
        if not options:
            continue
        options.sort(key=lambda x: (x[0], x[1]))
        need = layout[0] if layout is not None else 1
        if len(options) < need:
            continue
        picked = options[:need]
        cand = (max(t for t, _, _ in picked), tuple(c for _, _, cl in picked for c in cl))
        if best is None or cand[0] < best[0]:
            best = cand
    if best is None:
        return None
    return Hold(request_id, best[0], best[1], frozenset(c[0] for c in best[1]))


@hs.composite
def fleets(draw: hs.DrawFn) -> tuple[Snapshot, Request, int]:
    """A fleet with running work ending at drawn times (some already overdue at NOW, many at
    the same instant), a head request, and a seed for the reserved devices."""
    specs = []
    allocs: list[Allocation] = []
    ends = hs.sampled_from([NOW - 500.0, NOW, NOW + 100.0, NOW + 100.0, NOW + 700.0, NOW + 2e4])
    host = draw(hs.booleans())

    def run(claims: list[DeviceClaim], flavor: str, exclusive_node: bool = False) -> None:
        end = draw(ends)
        allocs.append(
            alloc(
                f"run{len(allocs):03d}",
                claims,
                flavor,
                started_at=0.0,
                max_runtime_seconds=end,
                cpu_millicores=draw(hs.sampled_from([0, 4_000, 16_000])) if host else 0,
                memory_mib=draw(hs.sampled_from([0, 32_768, 131_072])) if host else 0,
                exclusive_node=exclusive_node,
            )
        )

    for kind in ("excl", "vgpu", "mig"):
        for i in range(draw(hs.integers(0, 4))):
            nid = f"{kind}{i}"
            gpus = draw(hs.sampled_from([1, 2, 4, 8]))
            cpu = draw(hs.sampled_from([None, 32_000, 64_000])) if host else None
            mem = draw(hs.sampled_from([None, 262_144, 524_288])) if host else None
            n, devs = node(nid, pool=kind, gpus=gpus)
            n = type(n)(n.id, n.pool, n.gpu_model, cpu_millicores=cpu, memory_mib=mem)
            specs.append((n, devs))
            if kind == "excl" and draw(hs.integers(0, 5)) == 0:
                run(
                    whole_claims(nid, range(draw(hs.integers(1, gpus)))), "gpu", exclusive_node=True
                )
                continue
            taken: set[int] = set()
            for d in range(gpus):
                use = draw(hs.integers(0, 2))
                if use == 0 or d in taken:
                    continue
                if kind == "excl":
                    span = range(d, d + draw(hs.integers(1, gpus - d)))
                    taken.update(span)
                    run(whole_claims(nid, span), "gpu")
                elif kind == "vgpu":
                    left_mem, left_cores = MEM, 100
                    for _ in range(use):
                        m = draw(hs.sampled_from([10_240, 20_480, 40_960]))
                        c = draw(hs.sampled_from([10, 25, 50]))
                        if m <= left_mem and c <= left_cores:
                            left_mem, left_cores = left_mem - m, left_cores - c
                            claim = DeviceClaim(nid, d, whole=False, memory_mib=m, cores_percent=c)
                            run([claim], "v20")
                else:
                    mask = 0
                    for _ in range(use):
                        prof = MIG_PROFILES[draw(hs.sampled_from(sorted(MIG_PROFILES)))]
                        for s in prof.starts:
                            bits = ((1 << prof.slices) - 1) << s
                            if not mask & bits:
                                mask |= bits
                                run([mig_claim(nid, d, prof.name, s)], "m1")
                                break
    flavor = draw(hs.sampled_from(sorted(FLAVOR)))
    whole = FLAVOR[flavor].kind == "whole"
    head = req(
        "head",
        flavor,
        gpu_count=draw(hs.sampled_from([1, 2, 4, 8, 16] if whole else [1, 2, 3])),
        allow_shared_node=draw(hs.booleans()) or not whole,
        distributed=whole and draw(hs.booleans()),
        cpu_millicores=draw(hs.sampled_from([0, 8_000, 40_000])) if host else 0,
        memory_mib=draw(hs.sampled_from([0, 65_536, 300_000])) if host else 0,
    )
    return fleet(*specs, allocations=allocs), head, draw(hs.integers(0, 2**16))


@given(fleets())
@SETTINGS
def test_reservation_from_the_timeline_equals_the_dry_run_on_every_node(
    case: tuple[Snapshot, Request, int],
) -> None:
    snap, head, seed = case
    sched = Scheduler(snap)
    st = sched.st
    shape = shape_of(head, FLAVOR[head.flavor])
    groups = sched.placer.groups_for(shape)[0]
    blocked = frozenset(d for d in range(len(st.dev_node)) if (seed >> (d % 16)) & 1 and d % 3)
    for taken in (frozenset(), blocked):
        want = reference_reserve(st, "head", shape, groups, NOW, taken)
        assert reserve(st, "head", shape, groups, NOW, taken) == want
    # The bound never passes the node's start, and the dry run from it finds the same start.
    for g in groups:
        for n in g.nodes:
            count = min(shape.gpu_count, len(st.node_devices[n]))
            exact = reference_fit(st, n, shape, count, NOW, frozenset())
            bound = earliest_bound(st, n, shape, count, NOW)
            if exact is None:
                assert earliest_fit(st, n, shape, count, NOW, frozenset(), bound) is None
            else:
                assert bound <= exact[0]
                assert earliest_fit(st, n, shape, count, NOW, frozenset(), bound) == exact
            assert math.isinf(bound) <= (exact is None)


def test_a_whole_node_head_is_bounded_by_the_last_end_and_skips_later_nodes() -> None:
    # Three nodes busy until 1000, 3000, 2000; an 8-card head that wants a node of its own
    # starts on the first when its work ends, and the timeline puts its bound exactly there.
    snap = fleet(
        node("a"),
        node("b"),
        node("c"),
        allocations=[
            alloc("a1", whole_claims("a", [0]), max_runtime_seconds=500.0),
            alloc("a2", whole_claims("a", [1]), max_runtime_seconds=1000.0),
            alloc("b1", whole_claims("b", [0]), max_runtime_seconds=3000.0),
            alloc("c1", whole_claims("c", [2, 3]), max_runtime_seconds=2000.0),
        ],
    )
    sched = Scheduler(snap)
    st = sched.st
    head = req("head", gpu_count=8, allow_shared_node=False)
    shape = shape_of(head, FLAVOR["gpu"])
    bounds = [earliest_bound(st, st.node_of[n], shape, 8, 100.0) for n in "abc"]
    assert bounds == [1000.0, 3000.0, 2000.0]
    hold = reserve(st, "head", shape, sched.placer.groups_for(shape)[0], 100.0, frozenset())
    assert hold is not None and hold.start_at == 1000.0
    assert {st.node_ids[st.dev_node[d]] for d in hold.devices} == {"a"}
    # Work that ended before now counts as ending now.
    assert earliest_bound(st, st.node_of["a"], shape, 8, 1500.0) == 1500.0


def test_the_timeline_follows_work_applied_and_released() -> None:
    snap = fleet(
        node("a", gpus=2),
        allocations=[alloc("a1", whole_claims("a", [0]), max_runtime_seconds=500.0)],
    )
    st = Scheduler(snap).st
    a = st.node_of["a"]
    assert st.node_ends(a).ends == (500.0,)
    rec = st.allocs["a1"]
    st.release(rec)
    assert st.node_ends(a).ends == ()
    st.apply(rec)
    assert st.node_ends(a).ends == (500.0,) and st.node_ends(a).cards == (1,)
