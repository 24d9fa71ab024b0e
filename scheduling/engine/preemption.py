"""Preemption: find the smallest acceptable set of running work to evict for a request.

A request may preempt when it outranks a victim by priority, or when it is within its own
guaranteed quota and the victim is borrowed (reclaim).  Steps:

1. Victim eligibility: the allocation is preemptible (borrowed work always is), it is running
   (not admitted in this cycle), it sits on nodes of the request's eligible groups that hold no
   reserved capacity, its team is above its guaranteed quota for the victim's flavor (and stays
   counted as such while more victims of that team are chosen), and either its priority is lower
   than the request's or the request reclaims guaranteed quota and the victim is borrowed.
2. Per node, order eligible victims: borrowed before guaranteed, lower priority before higher,
   newest before oldest, then id.
3. Release victims in that order (a dry run on the live state, undone afterwards) until the
   request fits the node; then drop every chosen victim that turns out unnecessary, most
   protected first, so the set is minimal.
4. Choose the node with the fewest victims, then fewest guaranteed victims, then lowest
   highest-victim-priority, then node id.  Gangs take the best full nodes, all or nothing.
"""

from __future__ import annotations

from collections.abc import Collection

from .filters import fit_node, whole_devices
from .index import Group
from .placement import Placer
from .quota import EPS, QuotaLedger
from .state import AllocRecord, Claim, FleetState, Shape


def victim_order(rec: AllocRecord) -> tuple[int, int, float, str]:
    """Sort key: cheapest victim first."""
    return (0 if rec.borrowed else 1, rec.priority, -rec.started_at, rec.id)


def find_victims(
    st: FleetState,
    placer: Placer,
    ledger: QuotaLedger,
    shape: Shape,
    groups: list[Group],
    priority: int,
    reclaim: bool,
    blocked: Collection[int],
) -> tuple[tuple[Claim, ...], list[AllocRecord]] | None:
    """Claims and victims for the cheapest preemption, or None.  Leaves `st` unchanged."""
    gang = shape.kind == "whole" and shape.gpu_count > min(g.max_devices for g in groups)

    def eligible(rec: AllocRecord) -> bool:
        return (
            rec.preemptible
            and rec.from_snapshot
            and (rec.priority < priority or (reclaim and rec.borrowed))
        )

    results: list[tuple[tuple[int, int, int, int], int, tuple[Claim, ...], list[AllocRecord]]] = []
    for g in groups:
        count = g.max_devices if gang else shape.gpu_count
        for node in g.nodes:
            if st.node_preemptible[node] == 0 or not st.node_schedulable[node]:
                continue
            if blocked and any(d in blocked for d in st.node_devices[node]):
                continue
            cands = sorted(
                (rec for rid in st.node_allocs[node] if eligible(rec := st.allocs[rid])),
                key=victim_order,
            )
            if not cands:
                continue
            found = _victims_on_node(st, placer, ledger, node, shape, count, cands)
            if found is not None:
                claims, victims = found
                cost = (
                    len(victims),
                    sum(1 for v in victims if not v.borrowed),
                    max(v.priority for v in victims),
                    node,
                )
                results.append((cost, node, claims, victims))
    if not results:
        return None
    results.sort(key=lambda x: x[0])
    if not gang:
        _, _, claims, victims = results[0]
        return claims, victims
    # Gang: full nodes, within one group, all or nothing.
    for g in groups:
        q, r = divmod(shape.gpu_count, g.max_devices)
        need = q + (1 if r else 0)
        mine = [x for x in results if placer.index.node_group.get(x[1]) is g]
        free_nodes = [
            n
            for n in g.whole[g.max_devices]
            if placer.node_ok(n, shape)
            and not (blocked and any(d in blocked for d in st.node_devices[n]))
        ]
        picked_claims: list[Claim] = []
        picked_victims: list[AllocRecord] = []
        nodes_used = 0
        for n in free_nodes:
            if nodes_used == need:
                break
            devs = whole_devices(st, n, g.max_devices)
            if devs is not None:
                picked_claims.extend((d, True, 0, 0, 0) for d in devs)
                nodes_used += 1
        for _, _, claims, victims in mine:
            if nodes_used == need:
                break
            if any(v in picked_victims for v in victims):
                continue
            picked_claims.extend(claims)
            picked_victims.extend(victims)
            nodes_used += 1
        if nodes_used == need:
            return tuple(picked_claims[: shape.gpu_count]), picked_victims
    return None


def _victims_on_node(
    st: FleetState,
    placer: Placer,
    ledger: QuotaLedger,
    node: int,
    shape: Shape,
    count: int,
    cands: list[AllocRecord],
) -> tuple[tuple[Claim, ...], list[AllocRecord]] | None:
    """Dry-run victims on one node (state restored before returning)."""
    removed: dict[tuple[str, str], float] = {}
    chosen: list[AllocRecord] = []
    claims: tuple[Claim, ...] | None = None
    for rec in cands:
        key = (rec.team, rec.flavor)
        used = ledger.used[key] - removed.get(key, 0.0)
        if used <= ledger.guaranteed.get(key, 0.0) + EPS:
            continue  # never take a victim from a team at or below its guarantee
        removed[key] = removed.get(key, 0.0) + rec.ge
        st.release(rec, notify=False)
        chosen.append(rec)
        if placer.node_ok(node, shape):
            claims = fit_node(st, node, shape, count)
            if claims is not None:
                break
    if claims is None:
        for rec in reversed(chosen):
            st.apply(rec, notify=False)
        return None
    # Minimise: put back victims (most protected first) that the request does not need.
    needed: list[AllocRecord] = []
    for rec in reversed(chosen):
        st.apply(rec, notify=False)
        again = fit_node(st, node, shape, count) if placer.node_ok(node, shape) else None
        if again is None:
            st.release(rec, notify=False)
            needed.append(rec)
        else:
            claims = again
    for rec in needed:
        st.apply(rec, notify=False)
    needed.reverse()
    return claims, needed
