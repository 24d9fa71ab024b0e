"""GPUs held by pods the portal did not create, taken out of what the engine sees free.

Inventory records them per node (`Node.foreign_usage`, resource → amount, as the cluster's
pods ask for them); the cluster does not say which card such a pod got, so the snapshot charges
them to the node's free cards from the highest index down, leaving the portal's own claims
where they are:
- `nvidia.com/gpu` on a whole-card node: that many free cards become taken;
- `nvidia.com/gpumem` / `nvidia.com/gpucores` on a vGPU node: memory and cores are taken from
  the cards, each down to nothing before the next (a foreign `nvidia.com/gpu` alone, HAMi's
  share without sizes, takes nothing: HAMi gives it a whole card's memory only when asked);
- `nvidia.com/mig-<profile>` on a MIG node: that many free instances of the profile are taken.

Their CPU and memory requests (`cpu_millicores`, `memory_mib`) come off the node's allocatable
host resources (`host_left`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from scheduling.engine.types import (
    MIG_PROFILES,
    GpuDevice,
    mig_bits,
    mig_layout_starts,
)

GPU = "nvidia.com/gpu"
GPU_MEMORY = "nvidia.com/gpumem"
GPU_CORES = "nvidia.com/gpucores"
MIG_PREFIX = "nvidia.com/mig-"
CPU_MILLICORES = "cpu_millicores"
MEMORY_MIB = "memory_mib"


def host_left(
    cpu_millicores: int | None, memory_mib: int | None, usage: Mapping[str, int]
) -> tuple[int | None, int | None]:
    """A node's allocatable CPU and memory minus what foreign pods request (None: not known)."""
    cpu = None if cpu_millicores is None else max(0, cpu_millicores - usage.get(CPU_MILLICORES, 0))
    memory = None if memory_mib is None else max(0, memory_mib - usage.get(MEMORY_MIB, 0))
    return cpu, memory


def _take_mig(device: GpuDevice, profile: str, wanted: int) -> tuple[GpuDevice, int]:
    """Mark up to `wanted` free instances of `profile` on the card used; (card, how many)."""
    if profile not in MIG_PROFILES or wanted <= 0:
        return device, 0
    starts = (
        mig_layout_starts(device.mig_layout).get(profile, ())
        if device.mig_layout
        else MIG_PROFILES[profile].starts
    )
    mask, taken = device.mig_used_mask, 0
    for start in starts:
        bits = mig_bits(profile, start)
        if taken < wanted and not mask & bits:
            mask |= bits
            taken += 1
    return replace(device, mig_used_mask=mask), taken


def _charge_node(devices: list[GpuDevice], usage: Mapping[str, int], sharing: str) -> None:
    """Charge one node's foreign usage to its cards (in place), highest index first."""
    order = sorted(range(len(devices)), key=lambda i: -devices[i].index)
    if sharing == "exclusive":
        left = int(usage.get(GPU, 0))
        for i in order:
            if left > 0 and devices[i].usage.idle:
                devices[i] = replace(devices[i], whole_allocated=True)
                left -= 1
    elif sharing == "vgpu":
        memory, cores = int(usage.get(GPU_MEMORY, 0)), int(usage.get(GPU_CORES, 0))
        for i in order:
            device = devices[i]
            take_memory = min(memory, device.memory_free_mib)
            take_cores = min(cores, device.cores_free_percent)
            memory, cores = memory - take_memory, cores - take_cores
            devices[i] = replace(
                device,
                memory_free_mib=device.memory_free_mib - take_memory,
                cores_free_percent=device.cores_free_percent - take_cores,
            )
    elif sharing == "mig":
        for resource, amount in sorted(usage.items()):
            if not resource.startswith(MIG_PREFIX):
                continue
            profile, left = resource.removeprefix(MIG_PREFIX), int(amount)
            for i in order:
                devices[i], taken = _take_mig(devices[i], profile, left)
                left -= taken


def subtract_foreign_usage(
    devices: Sequence[GpuDevice],
    usage_by_node: Mapping[str, Mapping[str, int]],
    sharing_by_node: Mapping[str, str],
) -> list[GpuDevice]:
    """`devices` with each node's foreign usage charged to its free capacity."""
    out = list(devices)
    by_node: dict[str, list[int]] = {}
    for position, device in enumerate(out):
        by_node.setdefault(device.node_id, []).append(position)
    for node, usage in usage_by_node.items():
        positions = by_node.get(node, [])
        if not usage or not positions:
            continue
        cards = [out[p] for p in positions]
        _charge_node(cards, usage, sharing_by_node.get(node, "exclusive"))
        for position, card in zip(positions, cards, strict=True):
            out[position] = card
    return out
