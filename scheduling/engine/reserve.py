"""Short-request reserve (lifecycle isolation): long work may not take a pool's last share.

A pool with `short_reserve_fraction` f > 0 keeps f x its capacity (GE of its schedulable GPUs)
for short requests, those with `max_runtime_seconds <= short_max_runtime_seconds`.  A long
request may be placed in the pool only if the pool's free GE after admission is at least
f x capacity; short requests may use everything.  Free GE is capacity minus the GE of the
allocations on the pool's schedulable nodes (the same GE that quotas count), kept current on
every admission and preemption by `FleetState`.

Why a share of the pool and not dedicated nodes: short and long requests keep sharing every
node (packing and fragmentation scores still apply), and the reserve moves with the load
instead of idling a fixed set of GPUs.  Because capacity only shrinks during a cycle except
through preemption (which clears the failure memo), a long request refused by the reserve
stays refused for the rest of the cycle, so the memo stays valid when it is keyed on the set
of reserved pools the request counts as long in.
"""

from __future__ import annotations

from .state import AllocRecord, Claim, FleetState
from .types import Pool

#: Slack for float sums of GE (a 1/7 MIG slice does not add up exactly).
EPS = 1e-9


def format_duration(seconds: float) -> str:
    """Short human form of a duration: "90 s", "45 min", "2 h", "1.5 h", "3 d"."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200 and seconds % 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 3 * 86400:
        return f"{seconds / 3600:g} h" if (seconds / 3600) % 0.5 == 0 else f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d".replace(".0 d", " d")


def reserve_reason(pool: Pool) -> str:
    """Why a long request cannot use `pool` (phrased for the request page)."""
    return (
        f"pool {pool.label} keeps {pool.short_reserve_fraction:.0%} for requests up to "
        f"{format_duration(pool.short_max_runtime_seconds)}"
    )


def is_long(pool: Pool, max_runtime_seconds: float) -> bool:
    """Whether the pool's reserve applies to a request of this max runtime."""
    return pool.short_reserve_fraction > 0 and max_runtime_seconds > pool.short_max_runtime_seconds


def leaves_reserve(pool: Pool, capacity_ge: float, used_ge: float, demand_ge: float) -> bool:
    """Whether taking `demand_ge` more still leaves the pool's reserved share free."""
    return capacity_ge - used_ge - demand_ge >= pool.short_reserve_fraction * capacity_ge - EPS


def reserve_kept(
    st: FleetState, victims: list[AllocRecord], claims: tuple[Claim, ...], demand: float
) -> bool:
    """Whether evicting `victims` to place `demand` at `claims` leaves the pool's reserve no
    smaller."""
    pool = st.node_pool[st.dev_node[claims[0][0]]]
    freed = sum(v.ge for v in victims if st.node_pool[v.nodes[0]] == pool)
    if freed + EPS >= demand:
        return True
    used_after = st.pool_used[pool] - freed
    return leaves_reserve(st.pools[pool], st.pool_capacity[pool], used_after, demand)
