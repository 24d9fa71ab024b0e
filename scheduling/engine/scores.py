"""Score plugins: rate a feasible candidate placement in [0, 1]; the planner sums them weighted.

Each plugin is `(state, node, shape, claims, pool, preemptible) -> float` and is evaluated
before the claims are applied.  Pools choose `binpack` or `spread`; the packing plugins flip
direction accordingly.  Weights come from `Policy.scores` (or `Policy.pool_scores` per pool).

* pool_affinity  keep shareable hardware for shareable demand: whole-card work prefers
                 exclusive pools, leaving vGPU/MIG-capable cards to requests only they can serve.
* tier           prefer the cheapest pool tier that fits.
* node_packing   binpack: the node left with the fewest free cards, counted in cards (best-fit's
                 measure, so a 1-card job fills the 8-card node's last free card before it
                 breaks an empty node; a share counts the node's free cards as they are);
                 spread: the most.
* node_size      binpack: among spots that pack alike, the smaller node, so that large nodes stay
                 whole for large shapes (an 8-card job needs an empty 8-card node; a 1-card job
                 runs as well on a 1-card node).
* device_packing binpack: the tightest device for vGPU/MIG; spread: the loosest (averaged over
                 the GPUs of a multi-share request).
* fragmentation  do not break a fully free card or node when a partly used one fits; for vGPU,
                 keep memory and cores balanced; for MIG, keep the largest aligned block free
                 (averaged over the GPUs of a multi-share request).
* tenancy_mix    avoid mixing preemptible and non-preemptible work on a node, so preemption
                 frees whole nodes and guaranteed work is not disturbed.
* host_balance   keep a node's CPU, memory and GPUs used in like proportions after the
                 placement (kube-scheduler's NodeResourcesBalancedAllocation), so that CPU-heavy
                 work does not strand a node's free GPUs, nor GPU work its free CPU.

The stock weights (`types.DEFAULT_SCORES`) make the two node-packing rules decide and the others
break their ties, because on a day of arrivals and departures every other rule given a say left
large jobs waiting longer for an empty node (docs/benchmarks.md, packing on a mixed fleet).

Adding a rule: write the function, register it in SCORES, list `(name, weight)` in the policy.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from .filters import mig_value
from .state import UNLIMITED, Claim, FleetState, Shape
from .types import MIG_SLICES, Pool

ScoreFn = Callable[[FleetState, int, Shape, "tuple[Claim, ...]", Pool, bool], float]
_MAX_MIG_VALUE = mig_value(0)


def pool_affinity(
    st: FleetState, node: int, shape: Shape, claims: tuple[Claim, ...], pool: Pool, pre: bool
) -> float:
    """1 when the pool's sharing mode is the natural home of the flavor kind."""
    if shape.kind == "whole":
        return 1.0 if pool.sharing == "exclusive" else 0.0
    return 1.0


def tier(
    st: FleetState, node: int, shape: Shape, claims: tuple[Claim, ...], pool: Pool, pre: bool
) -> float:
    """Lower tiers score higher (1 / (1 + tier))."""
    return 1.0 / (1.0 + max(0, pool.tier))


def node_packing(
    st: FleetState, node: int, shape: Shape, claims: tuple[Claim, ...], pool: Pool, pre: bool
) -> float:
    """Free cards the node keeps, over the fleet's largest node: few (binpack) or many
    (spread) score high. Whole cards count the cards they take; a vGPU or MIG share counts the
    node as it is, so that it does not break a free card to look tighter (device_packing and
    fragmentation choose the card)."""
    if not st.largest_node:
        return 0.0
    taken = _newly_used(st, shape, claims) if shape.kind == "whole" else 0
    left = (st.node_free[node] - taken) / st.largest_node
    return 1.0 - left if pool.scoring == "binpack" else left


def node_size(
    st: FleetState, node: int, shape: Shape, claims: tuple[Claim, ...], pool: Pool, pre: bool
) -> float:
    """Binpack: 1 minus the node's cards over the fleet's largest node; spread: indifferent."""
    if pool.scoring != "binpack" or not st.largest_node:
        return 0.5
    return 1.0 - len(st.node_devices[node]) / st.largest_node


def device_packing(
    st: FleetState, node: int, shape: Shape, claims: tuple[Claim, ...], pool: Pool, pre: bool
) -> float:
    """Share of the chosen device left free after a vGPU/MIG placement (inverted for binpack)."""
    if shape.kind == "whole" or not claims:
        return 0.5
    if len(claims) > 1:
        return share_values(st, shape, claims, pool.scoring == "binpack")[0]
    dev, _, mem, _, bits = claims[0]
    if shape.kind == "vgpu":
        left = (st.mem_free[dev] - mem) / max(1, st.mem_total[dev])
    else:
        left = (MIG_SLICES - bin(st.mig_mask[dev] | bits).count("1")) / MIG_SLICES
    return 1.0 - left if pool.scoring == "binpack" else left


def fragmentation(
    st: FleetState, node: int, shape: Shape, claims: tuple[Claim, ...], pool: Pool, pre: bool
) -> float:
    """High when the placement leaves free capacity in large, usable pieces.

    Not breaking a fully free node/card only counts in binpack pools (spread wants the opposite).
    """
    binpack = pool.scoring == "binpack"
    if shape.kind == "whole":
        devs = st.node_devices[node]
        breaks_node = len(claims) < len(devs) and st.free_whole_count(node) == len(devs)
        return 0.0 if breaks_node and binpack else 1.0
    if len(claims) > 1:
        return share_values(st, shape, claims, binpack)[1]
    dev, _, mem, cores, bits = claims[0]
    breaks_card = 0.0 if st.fully_free(dev) and binpack else 0.5
    if shape.kind == "vgpu":
        mem_left = (st.mem_free[dev] - mem) / max(1, st.mem_total[dev])
        cores_left = (st.cores_free[dev] - cores) / 100.0
        return breaks_card + 0.5 * (1.0 - abs(mem_left - cores_left))
    return breaks_card + 0.5 * mig_value(st.mig_mask[dev] | bits) / _MAX_MIG_VALUE


def _newly_used(st: FleetState, shape: Shape, claims: tuple[Claim, ...]) -> int:
    """Fully free cards the claims start using (a GPU holding several MIG instances once)."""
    if shape.kind == "mig" and len(claims) > 1:
        return sum(1 for d in {c[0] for c in claims} if st.fully_free(d))
    return sum(1 for c in claims if st.fully_free(c[0]))


def share_values(
    st: FleetState, shape: Shape, claims: tuple[Claim, ...], binpack: bool
) -> tuple[float, float]:
    """(device_packing, fragmentation) of a multi-share vGPU/MIG placement.

    The single-share values averaged over the GPUs the shares land on, each GPU taken with all
    of the request's shares on it (several MIG instances may share one GPU).
    """
    per: dict[int, tuple[int, int, int]] = {}
    for dev, _, mem, cores, bits in claims:
        m, c, b = per.get(dev, (0, 0, 0))
        per[dev] = (m + mem, c + cores, b | bits)
    v_dev = v_frag = 0.0
    for dev in sorted(per):
        mem, cores, bits = per[dev]
        breaks_card = 0.0 if st.fully_free(dev) and binpack else 0.5
        if shape.kind == "vgpu":
            left = (st.mem_free[dev] - mem) / max(1, st.mem_total[dev])
            cores_left = (st.cores_free[dev] - cores) / 100.0
            v_frag += breaks_card + 0.5 * (1.0 - abs(left - cores_left))
        else:
            mask = st.mig_mask[dev] | bits
            left = (MIG_SLICES - bin(mask).count("1")) / MIG_SLICES
            v_frag += breaks_card + 0.5 * mig_value(mask) / _MAX_MIG_VALUE
        v_dev += 1.0 - left if binpack else left
    return v_dev / len(per), v_frag / len(per)


def tenancy_mix(
    st: FleetState, node: int, shape: Shape, claims: tuple[Claim, ...], pool: Pool, pre: bool
) -> float:
    """Share of the node's tenants with the same preemptibility as the request (0.5 if empty)."""
    tenants = st.node_tenants[node]
    if tenants == 0:
        return 0.5
    same = st.node_preemptible[node] if pre else tenants - st.node_preemptible[node]
    return same / tenants


def host_balance(
    st: FleetState, node: int, shape: Shape, claims: tuple[Claim, ...], pool: Pool, pre: bool
) -> float:
    """1 minus the spread (standard deviation) of the node's used shares of CPU, memory and
    GPU cards after the placement; 0.5 when the node reports neither CPU nor memory."""
    if not st.host_tracked(node):
        return 0.5
    n = len(st.node_devices[node])
    shares: list[float] = []
    if n:
        shares.append((n - st.node_free[node] + _newly_used(st, shape, claims)) / n)
    for total, free, need in (
        (st.node_cpu_total[node], st.node_cpu_free[node], shape.cpu_millicores),
        (st.node_mem_total[node], st.node_mem_free[node], shape.host_memory_mib),
    ):
        if total != UNLIMITED and total > 0:
            shares.append(min(1.0, max(0.0, (total - free + need) / total)))
    if len(shares) < 2:
        return 0.5
    mean = sum(shares) / len(shares)
    spread: float = math.sqrt(sum((x - mean) ** 2 for x in shares) / len(shares))
    return 1.0 - spread


#: Plugins whose value depends only on the pool and shape: evaluated once per group.
POOL_LEVEL: frozenset[str] = frozenset({"pool_affinity", "tier"})

SCORES: dict[str, ScoreFn] = {
    "pool_affinity": pool_affinity,
    "tier": tier,
    "node_packing": node_packing,
    "node_size": node_size,
    "device_packing": device_packing,
    "fragmentation": fragmentation,
    "tenancy_mix": tenancy_mix,
    "host_balance": host_balance,
}
