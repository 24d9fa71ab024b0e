"""Queue ranks: where each waiting request stands, as keys that survive the queue's churn.

A cycle's plan lists the waiting requests in queue order. Storing each one's 1-based position
would rewrite every row behind an admission, a cancellation or an arrival: at 50,000 waiting,
one admission near the head is 50,000 row updates. A rank is a sparse key instead (spaced
`RANK_SPACING` apart): requests whose stored ranks are still in queue order keep them, and only
the others (new, requeued, moved by priority or aging) get a rank between their neighbours.
The position is then counted when a page reads it (`scheduling.selectors.queue`).

Which ranks to keep: the longest run of stored ranks that is increasing in the new order, so
the fewest rows are rewritten. When two kept neighbours leave no room between them, every rank
is renumbered once (one write per waiting row, then room again for `log2(RANK_SPACING)`
insertions at the same place).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping, Sequence

RANK_SPACING = 1 << 20


def moved_ranks(order: Sequence[int], stored: Mapping[int, int | None]) -> dict[int, int]:
    """The new rank of each request of `order` (queue order, head first) whose stored rank
    (`stored`, None for none) is missing or out of order; requests left out keep theirs."""
    ranks = [stored.get(pk) for pk in order]
    kept = _longest_increasing(ranks)
    if not kept:
        return _renumbered(order, ranks)
    new: list[int | None] = list(ranks)
    previous: int | None = None
    index = 0
    while index < len(order):
        if index in kept:
            previous = ranks[index]
            index += 1
            continue
        end = index
        while end < len(order) and end not in kept:
            end += 1
        count = end - index
        upper = ranks[end] if end < len(order) else None
        lower = previous if previous is not None else _minus_room(upper, count)
        upper = upper if upper is not None else lower + (count + 1) * RANK_SPACING
        step = (upper - lower) // (count + 1)
        if step < 1:
            return _renumbered(order, ranks)
        for offset in range(count):
            new[index + offset] = lower + step * (offset + 1)
        index = end
    return {
        pk: rank
        for pk, rank, old in zip(order, new, ranks, strict=True)
        if rank is not None and rank != old
    }


def _minus_room(upper: int | None, count: int) -> int:
    if upper is None:  # unreachable: some rank is kept, so a run has a neighbour
        raise ValueError("a run of new ranks needs a kept neighbour")
    return upper - (count + 1) * RANK_SPACING


def _renumbered(order: Sequence[int], ranks: Sequence[int | None]) -> dict[int, int]:
    fresh = [(index + 1) * RANK_SPACING for index in range(len(order))]
    return {pk: rank for pk, rank, old in zip(order, fresh, ranks, strict=True) if rank != old}


def _longest_increasing(ranks: Sequence[int | None]) -> set[int]:
    """The indices of a longest strictly increasing subsequence of the ranks that are not None
    (patience sorting, O(n log n))."""
    tails: list[int] = []  # the smallest last rank of an increasing run of each length
    tail_index: list[int] = []
    before: dict[int, int] = {}
    for index, rank in enumerate(ranks):
        if rank is None:
            continue
        length = bisect_left(tails, rank)
        if length == len(tails):
            tails.append(rank)
            tail_index.append(index)
        else:
            tails[length] = rank
            tail_index[length] = index
        if length:
            before[index] = tail_index[length - 1]
    kept: set[int] = set()
    index = tail_index[-1] if tail_index else -1
    while index >= 0:
        kept.add(index)
        index = before.get(index, -1)
    return kept
