"""Where the demo's runs ran: each run's cards, chosen among those free enough while it runs.

Shares are packed onto cards already in use first, as the engine bin-packs; whole cards are
never shared; the benchmarks keep their own two cards. `write_allocations` writes the runs'
allocations with those claims.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from portal.demo_requests import Drawn, Run
from scheduling.choices import FlavorKind, RequestStatus
from scheduling.models import Allocation, GpuDevice


@dataclass(frozen=True, slots=True)
class DemoCard:
    index: int
    memory_mib: int
    mig_layout: dict[str, int]


# (node, index) -> [(start, end, whole, memory MiB, cores %, MIG profile)] of the claims so far
Booked = dict[tuple[str, int], list[tuple[datetime, datetime, bool, int, int, str]]]


def cards_of_nodes() -> dict[str, list[DemoCard]]:
    cards: dict[str, list[DemoCard]] = defaultdict(list)
    for name, index, memory, layout in GpuDevice.objects.order_by(
        "node__name", "index"
    ).values_list("node__name", "index", "memory_mib", "mig_layout"):
        cards[name].append(DemoCard(index, memory, layout if isinstance(layout, dict) else {}))
    return cards


def _fits(
    booked: Booked, key: tuple[str, int], card: DemoCard, run: Run, claim: dict[str, Any]
) -> bool:
    """Whether the claim fits the card beside what is booked on it during the run."""
    during = [b for b in booked.get(key, []) if b[0] < run.ended_at and run.started_at < b[1]]
    if claim["whole"] or any(b[2] for b in during):
        return not during
    profile = claim["mig_profile"]
    if profile:
        same = sum(1 for b in during if b[5] == profile)
        return same < card.mig_layout.get(profile, 0)
    memory = sum(b[3] for b in during) + claim["memory_mib"]
    cores = sum(b[4] for b in during) + claim["cores_percent"]
    return memory <= card.memory_mib and cores <= 100


def _place(
    *,
    pool_nodes: list[str],
    drawn_node: str,
    offsets: list[int],
    claim: dict[str, Any],
    run: Run,
    cards: dict[str, list[DemoCard]],
    booked: Booked,
    kept: set[tuple[str, int]],
) -> tuple[str, list[int]]:
    """Cards for the run that are free enough while it runs, looked for from the drawn node and
    card on, shares packed onto cards already in use first (as the engine bin-packs); the drawn
    ones if none fit (the benchmarks' cards in `kept` are never taken)."""
    start = pool_nodes.index(drawn_node)

    def in_use(node: str, index: int) -> bool:
        return any(
            b[0] < run.ended_at and run.started_at < b[1] for b in booked.get((node, index), [])
        )

    candidates = []
    for node in pool_nodes[start:] + pool_nodes[:start]:
        devices = cards.get(node, [])
        if not devices:
            continue
        first = offsets[0] % len(devices)
        order = devices[first:] + devices[:first]
        free = [
            d.index
            for d in order
            if (node, d.index) not in kept and _fits(booked, (node, d.index), d, run, claim)
        ]
        if not claim["whole"]:
            free.sort(key=lambda index: not in_use(node, index))
        if len(free) >= len(offsets):
            candidates.append((node, free[: len(offsets)]))
    if candidates:
        if claim["whole"]:
            return candidates[0]
        return max(candidates, key=lambda c: sum(in_use(c[0], index) for index in c[1]))
    devices = cards.get(drawn_node, [])
    count = len(devices) or 8
    indexes = [(position + offset) % count for position, offset in enumerate(offsets)]
    return drawn_node, [
        (i + 2) % count if (drawn_node, i) in kept and count >= 4 else i for i in indexes
    ]


def write_allocations(
    drawn: list[Drawn],
    nodes: dict[int, list[str]],
    draw: random.Random,
    cards: dict[str, list[DemoCard]],
) -> list[Allocation]:
    """The runs' allocations on cards that had room for them (whole cards are never shared);
    the benchmarks keep their own two cards."""
    allocations: list[Allocation] = []
    moments: list[datetime] = []
    booked: Booked = defaultdict(list)
    kept = {
        (one.card[0], one.card[1] + index)
        for one in drawn
        if one.card is not None
        for index in range(one.request.gpu_count)
    }
    for one in drawn:
        request = one.request
        pool_id = request.flavor.pool_id
        for attempt, run in enumerate(one.runs, start=1):
            claim: dict[str, Any] = {
                "whole": request.flavor.kind == FlavorKind.WHOLE,
                "memory_mib": request.gpu_memory_mib or request.flavor.gpu_memory_mib,
                "cores_percent": request.gpu_cores_percent or request.flavor.gpu_cores_percent,
                "mig_profile": request.flavor.mig_profile,
                "mig_start": None,
            }
            if one.card is not None:
                node, first_card = one.card
                indexes = [first_card + index for index in range(request.gpu_count)]
            elif nodes[pool_id]:
                node, indexes = _place(
                    pool_nodes=nodes[pool_id],
                    drawn_node=draw.choice(nodes[pool_id]),
                    offsets=[draw.randrange(8) for _ in range(request.gpu_count)],
                    claim=claim,
                    run=run,
                    cards=cards,
                    booked=booked,
                    kept=kept,
                )
            else:
                node, indexes = "", [draw.randrange(8) for _ in range(request.gpu_count)]
            claims = [{"node": node, "device_index": index, **claim} for index in indexes]
            for index in indexes:
                booked[(node, index)].append(
                    (
                        run.started_at,
                        run.ended_at,
                        claim["whole"],
                        claim["memory_mib"],
                        claim["cores_percent"],
                        claim["mig_profile"],
                    )
                )
            allocations.append(
                Allocation(
                    request=request,
                    attempt=attempt,
                    pool_id=pool_id,
                    claims=claims,
                    is_borrowed=run.is_borrowed,
                    is_preemptible=run.is_borrowed or request.is_preemptible,
                    workload_name=f"gpr-{request.pk}-a{attempt}",
                    node_name=node,
                    started_at=run.started_at,
                    ended_at=run.ended_at,
                    end_reason=run.end_reason,
                    exit_code=0 if run.end_reason == RequestStatus.SUCCEEDED else None,
                )
            )
            moments.append(run.admitted_at)
    Allocation.objects.bulk_create(allocations, batch_size=500)
    for allocation, admitted_at in zip(allocations, moments, strict=True):
        allocation.admitted_at = admitted_at
    Allocation.objects.bulk_update(allocations, ["admitted_at"], batch_size=500)
    return allocations
