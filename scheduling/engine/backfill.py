"""EASY backfilling: reserve capacity for the blocked head of the queue, let others fill gaps.

When the first request of the queue that cannot start (the head) is blocked by capacity only:

1. For every node of its eligible groups that passes the static filters (schedulable, labels,
   taints, model), replay the node's allocations ending in order of expected end
   (max(expected_end, now), then id) as a dry run, until the head's per-node part fits.  That
   end time is the node's earliest start T_n.  (Full nodes for gangs; all N shares on the one
   node for a multi-share vGPU/MIG head.)  The dry run only runs where it can matter: each
   node's availability timeline (`FleetState.node_ends`: its running work in order of end,
   with the cards, host CPU and memory given back cumulatively, rebuilt only when the node's
   work changes) gives a bound no later than T_n (`earliest_bound`); nodes are tried in
   order of bound, and the search stops once the next bound is later than the best T_n found
   (for a gang, the k-th best).  The result is the same as dry-running every node.
2. The reservation is the node with the smallest T_n (ties: node id), or for a gang the
   smallest T_n of enough nodes, T = their maximum.  It holds the devices the head would use.
3. Every later request may use a reserved device only if it finishes by T
   (now + max_runtime_seconds <= T); otherwise it must fit elsewhere and waits "behind the
   reservation".  Work admitted on reserved devices therefore ends before the head starts, and
   work elsewhere does not touch its devices, so backfilling never delays the head.

When a request gets one, and how long it keeps it (planner.py):

* A request blocked by capacity only gets a reservation once it has waited
  `Policy.reservation_wait_seconds` in the queue (from `Request.queued_at`); until then it waits
  with code "capacity" and its reason says from when it will hold one.  Short waits thus cost
  no idle reserved cards, and a request that keeps waiting for a whole shape is protected.
* The cycle reports each reservation (`Plan.reservations`); the portal stores its start on the
  request, and the next cycle takes it up first (`Request.reserved_start_at`), before any
  request of the queue is placed.  Steps 1-2 then find a start no later than the one before:
  what was admitted onto its devices meanwhile ends by T, and nothing else touched them.  The
  start can only move later if the fleet itself shrinks (a node drained or lost) or a
  preemption by higher-priority work takes the cards, which step 3 keeps off reserved devices.
* A request holding a reservation keeps it until it starts or leaves the queue; a new head gets
  one only while fewer than `Policy.max_reservations` are held.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable, Sequence
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
from .types import Request, Reservation


@dataclass(frozen=True, slots=True)
class Hold:
    """A reservation in internal form."""

    request_id: str
    start_at: float
    claims: tuple[Claim, ...]
    devices: frozenset[int]


def held_requests(pending: Iterable[Request]) -> list[Request]:
    """The requests that held a reservation after the previous cycle, earliest start first."""
    return sorted(
        (r for r in pending if r.reserved_start_at is not None),
        key=lambda r: (r.reserved_start_at or 0.0, r.id),
    )


def keep_holds(
    st: FleetState, wanted: Iterable[tuple[str, Shape, list[Group]]], now: float, limit: int
) -> list[Hold]:
    """Reservations again for `wanted` (request id, shape, eligible groups), in that order, up
    to `limit`, each on devices the earlier ones left."""
    holds: list[Hold] = []
    for request_id, shape, groups in wanted:
        if len(holds) >= limit:
            break
        taken = frozenset(d for h in holds for d in h.devices)
        hold = reserve(st, request_id, shape, groups, now, taken)
        if hold is not None:
            holds.append(hold)
    return holds


def reservations(
    st: FleetState, holds: list[Hold], pending: Sequence[Request]
) -> tuple[Reservation, ...]:
    """The live holds as the plan reports them; a MIG claim names the profile its request asks
    for (several profiles share a slice count)."""
    wanted = {h.request_id for h in holds if h.claims}
    by_id = {r.id: r for r in pending if r.id in wanted} if wanted else {}
    return tuple(
        Reservation(
            h.request_id,
            h.start_at,
            tuple(
                st.device_claim(c, st.mig_profile_of(by_id[h.request_id]))
                if h.request_id in by_id
                else st.device_claim(c)
                for c in h.claims
            ),
        )
        for h in holds
        if h.claims
    )


def hold_of(holds: list[Hold], request_id: str) -> Hold | None:
    """The live reservation held for `request_id`, if any."""
    return next((h for h in holds if h.request_id == request_id and h.claims), None)


def drop_hold(holds: list[Hold], request_id: str) -> None:
    """The request started: its reservation keeps no one off its devices any more (kept in the
    list, empty and never starting, so positions of the others stay valid)."""
    for i, h in enumerate(holds):
        if h.request_id == request_id and h.claims:
            holds[i] = Hold(request_id, math.inf, (), frozenset())


def clock(at: float, now: float) -> str:
    """A moment as people read it in a reason: "14:20 UTC", or "14:20 UTC in 2 d" when it is a
    day or more after `now` (epoch seconds; the engine reads no clock and no time zone)."""
    if not math.isfinite(at):
        return "never"
    minute = int(at // 60)
    text = f"{minute // 60 % 24:02d}:{minute % 60:02d} UTC"
    days = int((at - now) // 86_400)
    return f"{text} in {days} d" if days >= 1 else text


def reserved_reason(st: FleetState, hold: Hold, now: float) -> str:
    """What the head is told: where and from when its capacity is held, and why smaller work
    may start before it."""
    nodes = sorted({st.node_ids[st.dev_node[c[0]]] for c in hold.claims})
    where = ", ".join(nodes[:3]) + (" ..." if len(nodes) > 3 else "")
    return (
        f"capacity reserved on {where} for request {hold.request_id}: starts by "
        f"{clock(hold.start_at, now)} (+{hold.start_at - now:.0f}s) when running work ends; "
        "smaller work runs on these cards only where it ends before"
    )


def behind_reason(hold: Hold | None, now: float) -> str:
    """What a request kept off reserved cards is told."""
    if hold is None:
        return "waiting behind a reservation"
    return (
        f"waiting behind reservation for request {hold.request_id} (starts by "
        f"{clock(hold.start_at, now)}); only work that ends before then may use its cards"
    )


_STATIC = (node_schedulable, node_labels, node_taints, gpu_model)


def candidates(st: FleetState, group: Group, shape: Shape, count: int) -> list[int]:
    """Nodes of `group` that could ever hold the head's per-node part: enough cards (or shares,
    for a multi-share head) and the static filters passed (cached: none of it changes)."""
    key = (shape, group.key, count)
    hit = st.backfill_nodes.get(key)
    if hit is None:
        hit = st.backfill_nodes[key] = []
        for node in group.nodes:
            if shape.kind == "whole":
                if len(st.node_devices[node]) < count:
                    continue
            elif count > 1 and max_shares(st, node, shape) < count:
                continue  # the node could never hold every share, even empty
            if any(f(st, node, shape) is not None for f in _STATIC):
                continue
            hit.append(node)
    return hit


def earliest_bound(st: FleetState, node: int, shape: Shape, count: int, now: float) -> float:
    """No earlier than `earliest_fit` (inf: never fits), from the node's timeline alone.

    Each ends-in-order release only gives capacity back, and the head's part needs at least:
    the node's own host CPU and memory, the node's exclusive holder gone, for whole cards
    `count` fully free ones (at most the free ones now plus the claims ended), and for a head
    that wants the node to itself every tenant gone.  The first end by which all hold is the
    bound; the overdue work (ended by `now`) counts as ending at `now`, whatever its order.
    """
    ends = st.node_ends(node)
    last = len(ends.recs)
    pos = -1
    if shape.kind == "whole":
        if not shape.allow_shared_node:
            pos = last - 1
        short = count - st.node_free[node]
        if short > 0:
            pos = max(pos, bisect_left(ends.cards, short))
    short = shape.cpu_millicores - st.node_cpu_free[node]
    if short > 0:
        pos = max(pos, bisect_left(ends.cpu_millicores, short))
    short = shape.host_memory_mib - st.node_mem_free[node]
    if short > 0:
        pos = max(pos, bisect_left(ends.memory_mib, short))
    if st.node_exclusive[node]:
        pos = max(pos, ends.first_exclusive if ends.first_exclusive >= 0 else last)
    if pos >= last:
        return math.inf
    return now if pos < 0 else max(ends.ends[pos], now)


def earliest_fit(
    st: FleetState,
    node: int,
    shape: Shape,
    count: int,
    now: float,
    blocked: frozenset[int],
    bound: float | None = None,
) -> tuple[float, tuple[Claim, ...]] | None:
    """Earliest time `count` devices of `shape` fit on `node` as running work ends (dry run).

    The node's work ends in order of (max(expected end, now), id); `bound` (`earliest_bound`)
    skips the fit checks before it, where none can succeed."""
    ends = st.node_ends(node)
    overdue = bisect_right(ends.ends, now)
    recs = sorted(ends.recs[:overdue], key=lambda r: r.id) + list(ends.recs[overdue:])
    after = now if bound is None else bound
    released: list[AllocRecord] = []
    found: tuple[float, tuple[Claim, ...]] | None = None
    t = now
    claims = fit_node(st, node, shape, count, blocked) if after <= now else None
    if claims is None or st.node_exclusive[node]:
        claims = None
        for rec in recs:
            st.release(rec, notify=False)
            released.append(rec)
            t = max(rec.end, now)
            if t >= after and not st.node_exclusive[node]:
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
    """A reservation for the head request, or None if it can never fit.

    Steps 1-2 of the module docstring, with the dry run only where it can matter: the nodes go
    in order of their `earliest_bound`, and once the best (or, for a gang, the `need` best)
    nodes found start no later than the next node's bound, no further node can change them.
    """
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
        need = layout[0] if layout is not None else 1
        bounds = sorted(
            (b, node)
            for node in candidates(st, g, shape, count)
            if (b := earliest_bound(st, node, shape, count, now)) < math.inf
        )
        options: list[tuple[float, int, tuple[Claim, ...]]] = []
        for bound, node in bounds:
            if len(options) >= need and (bound, node) > options[need - 1][:2]:
                break
            got = earliest_fit(st, node, shape, count, now, blocked, bound)
            if got is not None:
                insort(options, (got[0], node, got[1]))
        if len(options) < need:
            continue
        picked = options[:need]
        claims = tuple(c for _, _, cl in picked for c in cl)
        cand = (max(t for t, _, _ in picked), claims)
        if best is None or cand[0] < best[0]:
            best = cand
    if best is None:
        return None
    start, claims = best
    return Hold(request_id, start, claims, frozenset(c[0] for c in claims))
