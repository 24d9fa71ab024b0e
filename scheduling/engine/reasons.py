"""Why a request finds no spot: the capacity reasons a waiting request gets, phrased for people.

`capacity_reason` is asked once per request shape and cycle (the planner memoises failures), so
it may look at every node of the request's groups: when some node has room for the GPUs but
none of those has the pod's CPU and memory free, the reason says so (`host_reason`).
"""

from __future__ import annotations

from dataclasses import replace

from .filters import cpus_text, fit_gpus, gib_text, max_shares
from .index import GIB, Group
from .placement import Placer
from .state import MODE_VGPU, Shape, gang_layout, is_gang
from .types import MIG_PROFILES, Priority


def capacity_reason(placer: Placer, shape: Shape) -> str:
    """Why no spot exists for `shape` anywhere (phrased for people)."""
    groups, pool_reason = placer.groups_for(shape)
    where = "/".join(shape.models) if shape.models else "eligible"
    if not groups:
        if shape.models == ():
            return "the pinned GPU model contradicts the flavor's model"
        return f"no pool can run it ({pool_reason})" if pool_reason else "no pool can run it"
    host = host_reason(placer, shape, groups, where)
    if host is not None:
        return host
    if shape.kind == "whole":
        n = shape.gpu_count
        per = min(g.max_devices for g in groups)
        if is_gang(shape, per):
            layout = gang_layout(n, per)
            if layout is None:
                q = -(-n // per)
                return (
                    f"a {n}-GPU gang does not split evenly over {q} {where} nodes of {per} GPUs;"
                    f" ask for a multiple of {q}"
                )
            nodes, cards = layout
            return f"no {nodes} {where} nodes with {cards} free GPUs each for a {n}-GPU gang"
        if not shape.allow_shared_node:
            return f"no {where} node is entirely free (the request wants a node of its own)"
        gpus = f"{n} {where} GPU{'s' if n != 1 else ''}"
        largest = max(g.max_devices for g in groups)
        if n > largest:
            return f"needs {gpus} on one node; the largest node has {largest}"
        most = max(
            (k for g in groups for k in range(len(g.whole) - 1, 0, -1) if g.whole[k]),
            default=0,
        )
        return f"needs {gpus} on one node; the most free on one node is {most}"
    n = shape.gpu_count
    if shape.kind == "vgpu":
        gib = f"{shape.memory_mib / GIB:g}"
        cores = f" and {shape.cores_percent}% cores" if shape.cores_percent else ""
        if n > 1:
            most = most_shares(placer, shape, groups)
            never = (
                f" (the largest holds {most} such share{'s' if most != 1 else ''})"
                if most < n
                else ""
            )
            full = _at_share_limit(placer, shape, groups)
            return f"no {where} node has {n} GPUs with {gib} GiB{cores} free each{never}{full}"
        full = _at_share_limit(placer, shape, groups)
        return f"no {where} node has {gib} GiB{cores} free on one GPU{full}"
    if n > 1:
        most = most_shares(placer, shape, groups)
        never = f" (the largest holds {most})" if most < n else ""
        return f"no {where} node has {n} free {shape.mig_profile} MIG slices{never}"
    return f"no {where} GPU has a free {shape.mig_profile} MIG slice"


def host_reason(placer: Placer, shape: Shape, groups: list[Group], where: str) -> str | None:
    """The reason when host CPU or memory, not GPUs, is what is missing: some node that
    passes the filters has room for the GPUs now, but none of those has the host resources.
    None otherwise (or when the request asks for no host resources)."""
    cpu, mem = shape.cpu_millicores, shape.host_memory_mib
    if not cpu and not mem:
        return None
    room = gpu_room(placer, shape, groups)
    if not room:
        return None
    if any(c >= cpu and m >= mem for c, m in room):
        return None  # not host resources (a reservation, say)
    most_cpu = max(c for c, _ in room)
    most_mem = max(m for _, m in room)
    free = []
    if most_cpu < cpu:
        free.append(cpus_text(max(0, most_cpu)))
    if most_mem < mem:
        free.append(gib_text(max(0, most_mem)))
    have = (
        f"have at most {' and '.join(free)} free"
        if free
        else "have the CPU or the memory free, but none has both"
    )
    return (
        f"waiting for a node with {_host_words(cpu, mem)} free beside {gpu_words(shape, where)}; "
        f"the nodes with room for the GPUs {have}"
    )


def gpu_room(placer: Placer, shape: Shape, groups: list[Group]) -> list[tuple[int, int]]:
    """(free millicores, free MiB) of each node that passes the filters and has room for the
    request's GPUs now (its per-node part, for a gang).

    Only the nodes the capacity index files with room are looked at, and the answer is cached
    per GPU shape and group until work starts or stops in the group's pool: requests that
    differ only in CPU and memory share one scan.
    """
    st = placer.st
    key = replace(shape, cpu_millicores=0, host_memory_mib=0)
    gang = is_gang(shape, 0)
    room: list[tuple[int, int]] = []
    for g in groups:
        version = st.pool_version.get(g.pool.name, 0)
        hit = placer.room_cache.get((key, g.key))
        if hit is None or hit[0] != version:
            here: list[tuple[int, int]] = []
            for node in _gpu_candidates(placer, g, shape, gang):
                if not all(f(st, node, shape) is None for f in placer.node_filters):
                    continue
                n = min(shape.gpu_count, len(st.node_devices[node])) if gang else shape.gpu_count
                if fit_gpus(st, node, shape, n) is not None:
                    here.append((st.node_cpu_free[node], st.node_mem_free[node]))
            hit = placer.room_cache[(key, g.key)] = (version, here)
        room.extend(hit[1])
    return room


def _gpu_candidates(placer: Placer, g: Group, shape: Shape, gang: bool) -> list[int]:
    """Nodes of `g` that the capacity index files with room for `shape`'s GPUs (a superset of
    those that fit: `fit_gpus` decides), in index order."""
    st = placer.st
    if shape.kind == "whole":
        lo = 1 if gang else max(1, shape.gpu_count)
        return [n for k in range(lo, len(g.whole)) for n in g.whole[k]]
    if shape.kind == "vgpu":
        buckets = g.vgpu[shape.memory_mib // GIB :]
    elif shape.mig_profile in g.mig:
        buckets = g.mig[shape.mig_profile][MIG_PROFILES[shape.mig_profile].slices :]
    else:
        return []
    return list(dict.fromkeys(st.dev_node[d] for bucket in buckets for d in bucket))


def _at_share_limit(placer: Placer, shape: Shape, groups: list[Group]) -> str:
    """The words for the cards that have the share's memory and cores free but already hold
    as many vGPU shares as their split count allows ("" when none)."""
    st, m, c = placer.st, shape.memory_mib, shape.cores_percent
    keys = {g.key for g in groups}
    node_group = placer.index.node_group
    full = sum(
        1
        for d in st.at_share_limit
        if (g := node_group.get(st.dev_node[d])) is not None
        and g.key in keys
        and st.dev_mode[d] == MODE_VGPU
        and not st.whole[d]
        and st.mem_free[d] >= m
        and st.cores_free[d] >= c
    )
    if not full:
        return ""
    cards = "GPU has" if full == 1 else "GPUs have"
    return f"; {full} {cards} the room but already hold their vGPU share limit"


def most_shares(placer: Placer, shape: Shape, groups: list[Group]) -> int:
    """The most shares of `shape` any node of `groups` could hold when empty (cached)."""
    key = (shape.kind, shape.memory_mib, shape.cores_percent, shape.mig_profile)
    out = 0
    for g in groups:
        got = placer.most_cache.get((g.key, key))
        if got is None:
            got = placer.most_cache[(g.key, key)] = max(
                (max_shares(placer.st, n, shape) for n in g.nodes), default=0
            )
        out = max(out, got)
    return out


def gpu_words(shape: Shape, where: str) -> str:
    """What a request asks for on one node, in words ("4 A100 GPUs", "2 1g.10gb MIG instances")."""
    n = shape.gpu_count
    plural = "s" if n != 1 else ""
    if shape.kind == "whole":
        return f"{n} {where} GPU{plural}"
    if shape.kind == "vgpu":
        return f"{n} {where} vGPU share{plural} of {shape.memory_mib / GIB:g} GiB"
    return f"{n} {shape.mig_profile} MIG instance{plural}"


def _host_words(cpu: int, mem: int) -> str:
    parts = ([cpus_text(cpu)] if cpu else []) + ([gib_text(mem)] if mem else [])
    return " and ".join(parts)


def preemption_reason(
    team: str, priority: int, reclaim: bool, victim_priority: int, victim_borrowed: bool
) -> str:
    """Why work of `victim_priority` yields to a request of `team` at `priority` (`reclaim`:
    the request wins back its team's guarantee)."""
    if reclaim and victim_borrowed and victim_priority >= priority:
        return f"reclaims borrowed capacity for team {team}'s guaranteed quota"
    why = f"{_prio(victim_priority)} priority work yields to {_prio(priority)}"
    return why + (" (borrowed capacity)" if victim_borrowed else "")


def _prio(value: int) -> str:
    try:
        return Priority(value).name.lower()
    except ValueError:
        return str(value)
