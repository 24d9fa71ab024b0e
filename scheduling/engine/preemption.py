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
   highest-victim-priority, then node id.  Gangs take the best full nodes, all or nothing; a
   multi-share vGPU/MIG request needs one node where the victims free room for all N shares.

Host resources count like GPUs: a node fits only once the victims free the request's CPU and
memory too (`fit_node`), so work that holds a node's CPU can be preempted for it.
"""

from __future__ import annotations

from collections.abc import Collection

from .filters import fit_node, whole_devices
from .index import Group
from .placement import Placer
from .quota import EPS, QuotaLedger
from .state import (
    MODE_MIG,
    MODE_VGPU,
    AllocRecord,
    Claim,
    FleetState,
    Shape,
    gang_layout,
    is_gang,
)
from .types import MIG_PROFILES

PREEMPTION_CANDIDATES = 8


def victim_nodes(st: FleetState, ledger: QuotaLedger, g: Group) -> dict[int, None]:
    """Nodes of `g` hosting preemptible running work of a team above its guarantee.

    Built once per group and kept current by `team_rose_above_guarantee` (a team falling below
    its guarantee only leaves stale entries, which the per-victim check skips).
    """
    cache = st.victim_node_cache
    got = cache.get(g.key)
    if got is None:
        got = cache[g.key] = {
            n: None
            for n in st.group_victim_nodes(g.key, g.nodes)
            if any(ledger.above_guarantee(r.team, r.flavor) for r in st.node_victims[n])
        }
    return got


def team_rose_above_guarantee(st: FleetState, placer: Placer, team: str, flavor: str) -> bool:
    """Add the team's victim nodes to the cache; True if the team has any preemptible work."""
    nodes = st.victim_nodes_by_tf.get((team, flavor))
    if not nodes:
        return False
    for n in nodes:
        g = placer.index.node_group.get(n)
        if g is not None and g.key in st.victim_node_cache:
            st.victim_node_cache[g.key][n] = None
    return True


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
    """Claims and victims for the cheapest preemption, or None.  Leaves `st` unchanged.

    Like kube-scheduler's DefaultPreemption the search is bounded: it stops after
    PREEMPTION_CANDIDATES nodes with a feasible victim set, or at a single borrowed victim of the
    lowest priority class (nothing can be cheaper).
    """
    gang = is_gang(shape, min(g.max_devices for g in groups))
    results: list[tuple[tuple[int, int, int, int], int, tuple[Claim, ...], list[AllocRecord]]] = []
    done = False
    blocked_nodes = {st.dev_node[d] for d in blocked}
    borrowing: dict[tuple[str, str], bool] = {}
    for g in groups:
        if done:
            break
        layout = gang_layout(shape.gpu_count, g.max_devices) if gang else None
        if gang and layout is None:
            continue
        count = layout[1] if layout is not None else shape.gpu_count
        for node in victim_nodes(st, ledger, g):
            victims_here = st.node_victims.get(node)
            if not victims_here or not st.node_schedulable[node] or node in blocked_nodes:
                continue
            cands: list[AllocRecord] = []
            freeable = 0
            for rec in victims_here:
                if rec.priority < priority or (reclaim and rec.borrowed):
                    key = (rec.team, rec.flavor)
                    above = borrowing.get(key)
                    if above is None:
                        above = borrowing[key] = ledger.above_guarantee(rec.team, rec.flavor)
                    if not above:
                        continue  # its team is at or below its guarantee: never a victim
                    cands.append(rec)
                    freeable += sum(1 for c in rec.claims if st.dev_node[c[0]] == node)
                elif not rec.borrowed:
                    break  # sorted: the rest outrank the request
            if not cands:
                continue
            if shape.kind == "whole" and st.node_free[node] + freeable < count:
                continue
            if shape.kind != "whole" and not _could_fit(st, node, shape, cands, count):
                continue
            found = _victims_on_node(st, placer, ledger, node, shape, count, cands)
            if found is None:
                continue
            claims, victims = found
            cost = (
                len(victims),
                sum(1 for v in victims if not v.borrowed),
                max((v.priority for v in victims), default=-1),
                node,
            )
            results.append((cost, node, claims, victims))
            limit = PREEMPTION_CANDIDATES * (4 if gang else 1)
            if (not gang and cost[:3] == (1, 0, 0)) or len(results) >= limit:
                done = True
                break
    if not results:
        return None
    results.sort(key=lambda x: x[0])
    if not gang:
        _, _, claims, victims = results[0]
        return claims, victims
    # Gang: its layout's nodes, within one group, all or nothing.
    for g in groups:
        layout = gang_layout(shape.gpu_count, g.max_devices)
        if layout is None:
            continue
        need, per = layout
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
            devs = whole_devices(st, n, per)
            if devs is not None:
                picked_claims.extend((d, True, 0, 0, 0) for d in devs)
                nodes_used += 1
        for _, _, claims, victims in mine:
            if nodes_used == need:
                break
            if any(v in picked_victims for v in victims):
                continue
            picked_claims.extend(claims[:per])
            picked_victims.extend(victims)
            nodes_used += 1
        if nodes_used == need:
            return tuple(picked_claims), picked_victims
    return None


def _could_fit(
    st: FleetState, node: int, shape: Shape, cands: list[AllocRecord], count: int = 1
) -> bool:
    """Cheap upper bound for vGPU/MIG: could the request fit if every candidate left?

    One share: some device the candidates free up fits it.  N shares: counting every device of
    the node, N distinct devices fit a vGPU share, or N MIG instances fit (per device, the
    profile's free aligned starts once the candidates' slices are free).
    """
    gain: dict[int, tuple[bool, int, int, int]] = {}
    for rec in cands:
        for dev, whole, mem, cores, bits in rec.claims:
            if st.dev_node[dev] != node:
                continue
            w, m, c, b = gain.get(dev, (False, 0, 0, 0))
            gain[dev] = (w or whole, m + mem, c + cores, b | bits)
    if count > 1:
        return _shares_after(st, node, shape, gain) >= count
    for dev, (whole, mem, cores, bits) in gain.items():
        if st.whole[dev] and not whole:
            continue
        if shape.kind == "vgpu":
            if whole or (
                st.mem_free[dev] + mem >= shape.memory_mib
                and st.cores_free[dev] + cores >= shape.cores_percent
            ):
                return True
        elif shape.mig_profile is not None:
            mask = 0 if whole else st.mig_mask[dev] & ~bits
            prof = MIG_PROFILES[shape.mig_profile]
            starts = st.mig_starts_of(dev, prof.name)
            if any(not mask & (((1 << prof.slices) - 1) << s) for s in starts):
                return True
    return False


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


def _shares_after(
    st: FleetState, node: int, shape: Shape, gain: dict[int, tuple[bool, int, int, int]]
) -> int:
    """Shares of `shape` the node's devices could hold once the `gain` is freed."""
    total = 0
    prof = MIG_PROFILES.get(shape.mig_profile or "") if shape.kind == "mig" else None
    for dev in st.node_devices[node]:
        whole, mem, cores, bits = gain.get(dev, (False, 0, 0, 0))
        if st.whole[dev] and not whole:
            continue
        if shape.kind == "vgpu":
            if st.dev_mode[dev] == MODE_VGPU and (
                whole
                or (
                    st.mem_free[dev] + mem >= shape.memory_mib
                    and st.cores_free[dev] + cores >= shape.cores_percent
                )
            ):
                total += 1
        elif prof is not None and st.dev_mode[dev] == MODE_MIG:
            mask = 0 if whole else st.mig_mask[dev] & ~bits
            starts = st.mig_starts_of(dev, prof.name)
            total += sum(1 for s in starts if not mask & (((1 << prof.slices) - 1) << s))
    return total
