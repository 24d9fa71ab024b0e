"""A flavor offered in several pools (say, the same cards in two clusters): the engine places
its requests in whichever of those pools fits, and never outside them."""

from __future__ import annotations

from scheduling.engine.planner import plan
from scheduling.engine.types import Pool, Request, Snapshot

from .builders import alloc, fleet, node, req, whole_claims

EAST = Pool("east", tier=0, sharing="exclusive")
WEST = Pool("west", tier=0, sharing="exclusive")
OTHER = Pool("other", tier=0, sharing="exclusive")


def _fleet(*pending: Request, east_full: bool) -> Snapshot:
    allocations = [alloc("busy", whole_claims("e1", range(8)))] if east_full else []
    return fleet(
        node("e1", pool="east"),
        node("w1", pool="west"),
        node("o1", pool="other"),
        pools=(EAST, WEST, OTHER),
        allocations=allocations,
        pending=pending,
    )


def test_a_request_offered_two_pools_runs_in_the_one_with_room() -> None:
    snapshot = _fleet(req("r", gpu_count=4, pools=("east", "west")), east_full=True)
    (admission,) = plan(snapshot, now=0.0).admissions
    assert {claim.node_id for claim in admission.placement} == {"w1"}


def test_a_request_limited_to_one_pool_waits_when_that_pool_is_full() -> None:
    snapshot = _fleet(req("r", gpu_count=4, pools=("east",)), east_full=True)
    result = plan(snapshot, now=0.0)
    assert result.admissions == ()
    assert [waiting.request_id for waiting in result.waiting] == ["r"]


def test_no_request_is_placed_outside_its_pools() -> None:
    pending = [req(f"r{i}", gpu_count=4, pools=("east", "west")) for i in range(6)]
    result = plan(_fleet(*pending, east_full=False), now=0.0)
    placed = [claim.node_id for a in result.admissions for claim in a.placement]
    assert sorted(set(placed)) == ["e1", "w1"]
    assert len(result.admissions) == 4  # two 8-card nodes hold four 4-card requests


def test_requests_alike_but_for_their_pools_each_go_to_their_own() -> None:
    pending = [
        req("to-west", gpu_count=4, pools=("west",)),
        req("to-east", gpu_count=4, pools=("east",)),
    ]
    result = plan(_fleet(*pending, east_full=False), now=0.0)
    nodes = {a.request_id: {claim.node_id for claim in a.placement} for a in result.admissions}
    assert nodes == {"to-west": {"w1"}, "to-east": {"e1"}}
