"""Queue ranks: a cycle rewrites the ranks of the requests that moved, not of those behind them."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.services.queue_ranks import RANK_SPACING, moved_ranks


def ranked(order: list[int], stored: dict[int, int | None]) -> dict[int, int | None]:
    """The ranks after a cycle stores `moved_ranks`."""
    return {**stored, **moved_ranks(order, stored)}


def in_order(order: list[int], ranks: dict[int, int | None]) -> bool:
    values = [ranks[pk] for pk in order]
    known = [value for value in values if value is not None]
    return len(known) == len(values) and known == sorted(set(known))


def test_a_first_cycle_ranks_every_waiting_request_in_queue_order() -> None:
    assert moved_ranks([3, 1, 2], {}) == {3: RANK_SPACING, 1: 2 * RANK_SPACING, 2: 3 * RANK_SPACING}


def test_requests_that_leave_the_queue_move_no_other_rank() -> None:
    stored = ranked([1, 2, 3, 4, 5], {})
    assert moved_ranks([2, 4, 5], stored) == {}


def test_an_arrival_is_ranked_between_its_neighbours_alone() -> None:
    stored = ranked([1, 2, 3], {})
    new = moved_ranks([1, 2, 9, 3], stored)
    assert list(new) == [9]
    assert stored[2] < new[9] < stored[3]  # type: ignore[operator]


def test_a_request_that_moves_ahead_is_the_only_one_rewritten() -> None:
    stored = ranked(list(range(1, 101)), {})
    new = moved_ranks([70, *range(1, 70), *range(71, 101)], stored)
    assert list(new) == [70]
    assert new[70] < stored[1]  # type: ignore[operator]


def test_ranks_are_renumbered_when_no_room_is_left_between_neighbours() -> None:
    stored: dict[int, int | None] = {1: 10, 2: 11}
    new = moved_ranks([1, 3, 2], stored)
    assert in_order([1, 3, 2], {**stored, **new})


@settings(deadline=None)
@given(st.lists(st.integers(0, 40), max_size=40), st.integers(0, 2**32))
def test_ranks_follow_any_new_queue_order(churn: list[int], seed: int) -> None:
    """Whatever cycles do to the queue, stored ranks stay in its order and unique."""
    shuffle = random.Random(seed)
    order = list(range(20))
    ranks = ranked(order, {})
    for step, pick in enumerate(churn):
        if pick % 3 == 0 and order:
            order.pop(pick % len(order))  # admitted or cancelled
        elif pick % 3 == 1:
            order.insert(pick % (len(order) + 1), 1_000 + step)  # arrived
        elif order:
            order.insert(shuffle.randrange(len(order)), order.pop(pick % len(order)))  # moved
        ranks = ranked(order, ranks)
        assert in_order(order, ranks)
