"""A request that wants a node of its own takes any entirely free node that holds it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduling.engine.planner import plan
from scheduling.engine.types import Policy

from .builders import EXCL, alloc, fleet, node, req, whole_claims


@pytest.mark.parametrize("scoring", ["binpack", "spread"])
@pytest.mark.parametrize("placer", ["plugins", "best_fit"])
def test_exclusive_request_takes_a_free_node_smaller_than_the_pools_largest(
    scoring: str, placer: str
) -> None:
    snap = fleet(
        node("big", gpus=8),
        node("small", gpus=2),
        pools=(replace(EXCL, scoring=scoring),),  # type: ignore[arg-type]
        allocations=[alloc("run", whole_claims("big", [0]))],
        pending=[req("r", allow_shared_node=False)],
    )
    result = plan(snap, now=0.0, policy=Policy(placer=placer))  # type: ignore[arg-type]
    assert [a.node_ids for a in result.admissions] == [("small",)]
