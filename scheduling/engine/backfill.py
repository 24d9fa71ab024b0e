"""EASY backfilling: reserve capacity for the blocked head of the queue, let others fill gaps.

When the first request of the queue that cannot start (the head) is blocked by capacity only:

1. For every node of its eligible groups that passes the static filters (schedulable, labels,
   taints, model), replay the node's allocations ending in order of expected end
   (max(expected_end, now), then id) as a dry run, until the head's per-node part fits.  That
   end time is the node's earliest start T_n.  (Full nodes for gangs; all N shares on the one
   node for a multi-share vGPU/MIG head.)
2. The reservation is the node with the smallest T_n (ties: node id), or for a gang the
   smallest T_n of enough nodes, T = their maximum.  It holds the devices the head would use.
3. Every later request may use a reserved device only if it finishes by T
   (now + max_runtime_seconds <= T); otherwise it must fit elsewhere and waits "behind the
   reservation".  Work admitted on reserved devices therefore ends before the head starts, and
   work elsewhere does not touch its devices, so backfilling never delays the head.
"""

from __future__ import annotations

from dataclasses import dataclass

from .filters import (
    fit_node,
    gpu_model,
    max_shares,
    node_labels,
    node_schedulable,
    node_taints,
)
from .index import Group
from .state import AllocRecord, Claim, FleetState, Shape, gang_layout, is_gang


@dataclass(frozen=True, slots=True)
class Hold:
    """A reservation in internal form."""

    request_id: str
    start_at: float
    claims: tuple[Claim, ...]
    devices: frozenset[int]


_STATIC = (node_schedulable, node_labels, node_taints, gpu_model)


def earliest_fit(
    st: FleetState, node: int, shape: Shape, count: int, now: float, blocked: frozenset[int]
) -> tuple[float, tuple[Claim, ...]] | None:
    """Earliest time `count` devices of `shape` fit on `node` as running work ends (dry run)."""
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


def reserve(
    st: FleetState,
    request_id: str,
    shape: Shape,
    groups: list[Group],
    now: float,
    blocked: frozenset[int],
) -> Hold | None:
    """A reservation for the head request, or None if it can never fit."""
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
        for node in g.nodes:
            if shape.kind == "whole":
                if len(st.node_devices[node]) < count:
                    continue
            elif count > 1 and max_shares(st, node, shape) < count:
                continue  # the node could never hold every share, even empty
            if any(f(st, node, shape) is not None for f in _STATIC):
                continue
            got = earliest_fit(st, node, shape, count, now, blocked)
            if got is not None:
                options.append((got[0], node, got[1]))
        if not options:
            continue
        options.sort(key=lambda x: (x[0], x[1]))
        if layout is not None:
            need = layout[0]
            if len(options) < need:
                continue
            picked = options[:need]
            claims = tuple(c for _, _, cl in picked for c in cl)
            cand = (max(t for t, _, _ in picked), claims)
        else:
            cand = (options[0][0], options[0][2])
        if best is None or cand[0] < best[0]:
            best = cand
    if best is None:
        return None
    start, claims = best
    return Hold(request_id, start, claims, frozenset(c[0] for c in claims))
