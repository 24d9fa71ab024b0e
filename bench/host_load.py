"""Host resources for the engine benchmark: the W-GPU-2k snapshot with CPU and memory.

`with_host_resources(snapshot, seed)` gives every node the host a server with its cards comes
with, every running allocation and pending request the CPU and memory of its pod, and a share of
the nodes CPU-only load (pods of other tenants without GPUs), all drawn from `seed`:

* nodes: 12, 14 or 16 cores and 128, 192 or 256 GiB per card (an 8-card node: 96-128 cores,
  1-2 TiB);
* CPU-only load: 30% of the nodes have 10-60% of their CPU and 5-40% of their memory requested
  by pods without GPUs (what the snapshot subtracts as foreign usage);
* pods, per card: whole cards 2, 4, 8, 12 or 24 cores and 32, 64, 96, 128 or 256 GiB; vGPU
  shares 1, 2 or 4 cores and 8, 16 or 32 GiB; MIG instances 1 or 2 cores and 8 or 12 GiB per
  compute slice.  A gang's pod holds one node's worth (8 cards).

Running work keeps fitting: a node whose running pods already hold more than it offers after
the CPU-only load offers what they hold.  `overcommitted_nodes` counts the nodes a plan would
push past their CPU or memory, which is what kube-scheduler would leave Pending.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import numpy as np

from scheduling.engine.types import MIG_PROFILES, Allocation, Node, Plan, Request, Snapshot

GIB = 1024
CARDS_PER_GANG_POD = 8


def _pod_host(
    rng: np.random.Generator, kind: str, cards: int, profile: str | None
) -> tuple[int, int]:
    """(millicores, MiB) of one pod holding `cards` cards / shares / instances of `kind`."""
    if kind == "whole":
        cpu, mem = rng.choice([2, 4, 8, 12, 24]), rng.choice([32, 64, 96, 128, 256])
    elif kind == "vgpu":
        cpu, mem = rng.choice([1, 2, 4]), rng.choice([8, 16, 32])
    else:
        slices = MIG_PROFILES[profile].slices if profile in MIG_PROFILES else 1
        cpu, mem = slices * rng.choice([1, 2]), slices * rng.choice([8, 12])
    return int(cpu) * cards * 1000, int(mem) * cards * GIB


def with_host_resources(snap: Snapshot, seed: int) -> Snapshot:
    """`snap` with nodes' CPU and memory, CPU-only load, and pods' CPU and memory."""
    rng = np.random.default_rng(seed + 1_000)
    kind = {f.id: f.kind for f in snap.flavors}
    profile = {f.id: f.mig_profile for f in snap.flavors}
    cards: defaultdict[str, int] = defaultdict(int)
    for d in snap.devices:
        cards[d.node_id] += 1
    allocations: list[Allocation] = []
    held_cpu: defaultdict[str, int] = defaultdict(int)
    held_mem: defaultdict[str, int] = defaultdict(int)
    for a in snap.allocations:
        on = tuple(dict.fromkeys(c.node_id for c in a.placement))
        per_node = min(len(a.placement), CARDS_PER_GANG_POD) if len(on) > 1 else len(a.placement)
        cpu, mem = _pod_host(rng, kind[a.flavor], per_node, profile[a.flavor])
        allocations.append(replace(a, cpu_millicores=cpu, memory_mib=mem))
        for node_id in on:
            held_cpu[node_id] += cpu
            held_mem[node_id] += mem
    nodes: list[Node] = []
    for n in snap.nodes:
        k = max(1, cards[n.id])
        cpu = k * int(rng.choice([12, 14, 16])) * 1000
        mem = k * int(rng.choice([128, 192, 256])) * GIB
        if rng.random() < 0.30:  # CPU-only pods of other tenants
            cpu -= int(cpu * rng.uniform(0.10, 0.60))
            mem -= int(mem * rng.uniform(0.05, 0.40))
        nodes.append(
            replace(n, cpu_millicores=max(cpu, held_cpu[n.id]), memory_mib=max(mem, held_mem[n.id]))
        )
    pending = []
    for r in snap.pending:
        per_pod = r.gpu_count if not r.distributed else min(r.gpu_count, CARDS_PER_GANG_POD)
        cpu, mem = _pod_host(rng, kind[r.flavor], per_pod, r.mig_profile or profile[r.flavor])
        pending.append(replace(r, cpu_millicores=cpu, memory_mib=mem))
    return replace(snap, nodes=tuple(nodes), allocations=tuple(allocations), pending=tuple(pending))


def without_host_requests(snap: Snapshot) -> Snapshot:
    """The same snapshot with the nodes' host resources unknown: the engine places by GPUs
    alone, as it did before it counted CPU and memory."""
    return replace(
        snap, nodes=tuple(replace(n, cpu_millicores=None, memory_mib=None) for n in snap.nodes)
    )


def overcommitted_nodes(snap: Snapshot, plan: Plan) -> int:
    """Nodes of `snap` whose CPU or memory the running work plus `plan` would exceed."""
    victims = {p.victim_id for p in plan.preemptions}
    pending: dict[str, Request] = {r.id: r for r in snap.pending}
    cpu: defaultdict[str, int] = defaultdict(int)
    mem: defaultdict[str, int] = defaultdict(int)
    for a in snap.allocations:
        if a.request_id not in victims:
            for n in dict.fromkeys(c.node_id for c in a.placement):
                cpu[n] += a.cpu_millicores
                mem[n] += a.memory_mib
    for adm in plan.admissions:
        r = pending[adm.request_id]
        for n in adm.node_ids:
            cpu[n] += r.cpu_millicores
            mem[n] += r.memory_mib
    return sum(
        1
        for n in snap.nodes
        if (n.cpu_millicores is not None and cpu[n.id] > n.cpu_millicores)
        or (n.memory_mib is not None and mem[n.id] > n.memory_mib)
    )
