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

from scheduling.engine.types import (
    MIG_PROFILES,
    CardUsage,
    mig_bits,
    mig_layout_starts,
    stored_claim_usage,
)
from scheduling.models import Allocation, GpuDevice

Claim = dict[str, Any]


def relocated_claims(allocation: Allocation, node_name: str) -> list[Claim]:
    """`allocation`'s claims moved to `node_name`, each on a card or instance free there."""
    devices = {d.index: d for d in GpuDevice.objects.filter(node__name=node_name)}
    used: dict[int, CardUsage] = defaultdict(CardUsage)
    others = (
        Allocation.objects.active().exclude(pk=allocation.pk).filter(node_name__contains=node_name)
    )
    for other in others:
        for claim in other.claims:
            if claim.get("node") != node_name:
                continue
            used[claim["device_index"]] += stored_claim_usage(claim)
    moved: list[Claim] = []
    for claim in allocation.claims:
        index = _free_card(claim, devices, used)
        placed = {**claim, "node": node_name}
        if index is not None:
            placed["device_index"], start = index
            if start is not None:
                placed["mig_start"] = start
        used[placed["device_index"]] += stored_claim_usage(placed)
        moved.append(placed)
    return moved


def _free_card(
    claim: Claim, devices: dict[int, GpuDevice], used: dict[int, CardUsage]
) -> tuple[int, int | None] | None:
    """(card index, MIG start or None) of a place for `claim` that nothing holds, or None."""
    profile = claim.get("mig_profile")
    for index in sorted(devices):
        device, held = devices[index], used[index]
        if held.whole:
            continue
        if profile in MIG_PROFILES:
            layout = tuple(device.mig_layout.items())
            starts = (
                mig_layout_starts(layout).get(profile, ())
                if layout
                else MIG_PROFILES[profile].starts
            )
            for start in starts:
                if held.fits(CardUsage(mig_mask=mig_bits(profile, start)), device.memory_mib):
                    return index, start
        elif claim.get("whole") and held.fits(CardUsage(whole=True), device.memory_mib):
            return index, None
    if profile in MIG_PROFILES or claim.get("whole"):
        return None
    share = CardUsage(memory_mib=int(claim.get("memory_mib") or 0))
    roomy = [
        (device.memory_mib - used[index].memory_mib, -index)
        for index, device in devices.items()
        if used[index].fits(share, device.memory_mib)
    ]
    return (-max(roomy)[1], None) if roomy else None
