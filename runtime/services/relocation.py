"""Claims of work the cluster placed on another node than the engine planned, re-fitted there.

In a `placement=cluster` pool kube-scheduler picks the node; the device plugin picks the card or
MIG instance and does not say which. So that the next snapshot counts the work on the right
node without booking a card or MIG slice twice, each claim is given a card of the new node that
nothing else holds: a free card for a whole one, an instance of the card's layout that is free
for a MIG one, the card with the most memory left for a vGPU share. When the node has no room
left as the portal sees it, the claim keeps its card index (the cluster ran it, so the portal's
view was stale).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from scheduling.engine.types import MIG_PROFILES, mig_bits, mig_layout_starts
from scheduling.models import Allocation, GpuDevice

Claim = dict[str, Any]


def relocated_claims(allocation: Allocation, node_name: str) -> list[Claim]:
    """`allocation`'s claims moved to `node_name`, each on a card or instance free there."""
    devices = {d.index: d for d in GpuDevice.objects.filter(node__name=node_name)}
    whole: set[int] = set()
    mig_used: dict[int, int] = defaultdict(int)
    memory_used: dict[int, int] = defaultdict(int)
    others = (
        Allocation.objects.active().exclude(pk=allocation.pk).filter(node_name__contains=node_name)
    )
    for other in others:
        for claim in other.claims:
            if claim.get("node") != node_name:
                continue
            _book(claim, claim["device_index"], whole, mig_used, memory_used)
    moved: list[Claim] = []
    for claim in allocation.claims:
        index = _free_card(claim, devices, whole, mig_used, memory_used)
        placed = {**claim, "node": node_name}
        if index is not None:
            placed["device_index"], start = index
            if start is not None:
                placed["mig_start"] = start
        _book(placed, placed["device_index"], whole, mig_used, memory_used)
        moved.append(placed)
    return moved


def _book(
    claim: Claim,
    index: int,
    whole: set[int],
    mig_used: dict[int, int],
    memory_used: dict[int, int],
) -> None:
    profile, start = claim.get("mig_profile"), claim.get("mig_start")
    if profile in MIG_PROFILES and start is not None:
        mig_used[index] |= mig_bits(profile, start)
    elif claim.get("whole"):
        whole.add(index)
    else:
        memory_used[index] += int(claim.get("memory_mib") or 0)


def _free_card(
    claim: Claim,
    devices: dict[int, GpuDevice],
    whole: set[int],
    mig_used: dict[int, int],
    memory_used: dict[int, int],
) -> tuple[int, int | None] | None:
    """(card index, MIG start or None) of a place for `claim` that nothing holds, or None."""
    profile = claim.get("mig_profile")
    for index in sorted(devices):
        device = devices[index]
        if index in whole:
            continue
        if profile in MIG_PROFILES:
            layout = tuple(device.mig_layout.items())
            starts = (
                mig_layout_starts(layout).get(profile, ())
                if layout
                else MIG_PROFILES[profile].starts
            )
            for start in starts:
                if not mig_used[index] & mig_bits(profile, start):
                    return index, start
        elif claim.get("whole") and not mig_used[index] and not memory_used[index]:
            return index, None
    if profile in MIG_PROFILES or claim.get("whole"):
        return None
    roomy = [
        (device.memory_mib - memory_used[index], -index)
        for index, device in devices.items()
        if index not in whole
        and device.memory_mib - memory_used[index] >= int(claim.get("memory_mib") or 0)
    ]
    return (-max(roomy)[1], None) if roomy else None
