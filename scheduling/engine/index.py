"""Free-capacity index: buckets per (pool, GPU model) so placement never rescans the fleet.

For every group (pool, model) the index keeps three bucket arrays, each bucket an insertion-
ordered dict used as an ordered set (deterministic iteration, O(1) insert/remove):

* `whole[k]`  nodes with exactly k fully free GPUs (k >= 1);
* `vgpu[b]`   vGPU-mode devices with b GiB (floor) of memory free and some cores free;
* `mig[p][s]` MIG devices where profile p still fits, by number s of free slices.

A request of n whole GPUs looks at buckets n..max (binpack) or max..n (spread); a 20 GiB vGPU
request starts at bucket 20; a MIG request walks its profile's buckets.  `refresh_node` re-files
one node and its devices after any change; `FleetState` calls it through its listener.
Cordoned nodes and nodes held exclusively are never filed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .filters import mig_fits_on
from .mig import mig_gpu
from .state import MODE_MIG, MODE_VGPU, FleetState
from .types import MIG_PROFILES, MIG_SLICES, Pool

GIB = 1024
GroupKey = tuple[str, str]


@dataclass(slots=True)
class Group:
    """Index of one (pool, model) group."""

    key: GroupKey
    pool: Pool
    model: str
    nodes: list[int]
    max_devices: int
    whole: list[dict[int, None]]
    vgpu: list[dict[int, None]]
    mig: dict[str, list[dict[int, None]]]
    node_k: dict[int, int] = field(default_factory=dict)
    dev_vb: dict[int, int] = field(default_factory=dict)
    dev_mig: dict[int, list[tuple[str, int]]] = field(default_factory=dict)
    # The MIG profiles the group's GPU model offers (the MIG table); None: a model the table
    # does not know, filed under every profile.
    mig_offered: frozenset[str] | None = None


def _offered_profiles(model: str) -> frozenset[str] | None:
    gpu = mig_gpu(model)
    return frozenset(gpu.profile_names) if gpu is not None else None


class CapacityIndex:
    """Bucketed free capacity of every group, kept current by `refresh_node`."""

    def __init__(self, st: FleetState) -> None:
        self.st = st
        members: dict[GroupKey, list[int]] = {}
        for node in range(len(st.node_ids)):
            if st.node_pool[node] in st.pools:
                members.setdefault((st.node_pool[node], st.node_model[node]), []).append(node)
        self.groups: dict[GroupKey, Group] = {}
        self.node_group: dict[int, Group] = {}
        for key in sorted(members):
            nodes = members[key]
            max_devices = max((len(st.node_devices[n]) for n in nodes), default=0)
            max_mem = max((st.mem_total[d] for n in nodes for d in st.node_devices[n]), default=0)
            g = Group(
                key=key,
                pool=st.pools[key[0]],
                model=key[1],
                nodes=nodes,
                max_devices=max_devices,
                whole=[{} for _ in range(max_devices + 1)],
                vgpu=[{} for _ in range(max_mem // GIB + 1)],
                mig={p: [{} for _ in range(MIG_SLICES + 1)] for p in MIG_PROFILES},
                mig_offered=_offered_profiles(key[1]),
            )
            self.groups[key] = g
            for n in nodes:
                self.node_group[n] = g
                self.refresh_node(n)
        st.listener = self.refresh_node

    def refresh_node(self, node: int, devices: tuple[int, ...] | None = None) -> None:
        """Re-file `node` and `devices` (default: all of its devices) after a change."""
        g = self.node_group.get(node)
        if g is None:
            return
        st = self.st
        usable = st.node_schedulable[node] and not st.node_exclusive[node]
        k = st.node_free[node] if usable else 0
        old = g.node_k.get(node, 0)
        if old != k:
            if old:
                del g.whole[old][node]
                del g.node_k[node]
            if k:
                g.node_k[node] = k
                g.whole[k][node] = None
        devs = st.node_devices[node] if devices is None else devices
        for d in devs:
            mode = st.dev_mode[d]
            if mode == MODE_VGPU:
                ob = g.dev_vb.pop(d, None)
                if ob is not None:
                    del g.vgpu[ob][d]
                if (
                    usable
                    and not st.whole[d]
                    and st.cores_free[d] > 0
                    and st.mem_free[d] > 0
                    and st.share_room(d)
                ):
                    b = st.mem_free[d] // GIB
                    g.dev_vb[d] = b
                    g.vgpu[b][d] = None
            elif mode == MODE_MIG:
                for p, s in g.dev_mig.pop(d, ()):
                    del g.mig[p][s][d]
                if usable and not st.whole[d]:
                    mask = st.mig_mask[d]
                    fits = mig_fits_on(st, d)
                    if g.mig_offered is not None:
                        fits = tuple(name for name in fits if name in g.mig_offered)
                    if fits:
                        free = MIG_SLICES - bin(mask).count("1")
                        for name in fits:
                            g.mig[name][free][d] = None
                        g.dev_mig[d] = [(name, free) for name in fits]

    def free_whole_gpus(self, g: Group) -> int:
        """Fully free cards in a group (for reasons and metrics)."""
        return sum(k * len(b) for k, b in enumerate(g.whole))
