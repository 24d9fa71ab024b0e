"""explain_waits: the blocker of each waiting request, from the snapshot and the plan alone."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduling.engine.blockers import Blocker, explain_waits
from scheduling.engine.planner import plan
from scheduling.engine.types import Policy, Quota, Snapshot, Team

from .builders import EXCL, MEM, alloc, fleet, mig_claim, node, req, whole_claims

NO_BACKFILL = Policy(enable_backfill=False)


def blockers(snap: Snapshot, policy: Policy = NO_BACKFILL) -> dict[str, Blocker]:
    return explain_waits(snap, plan(snap, now=0.0, policy=policy))


def only(snap: Snapshot, rid: str = "r", policy: Policy = NO_BACKFILL) -> Blocker:
    found = blockers(snap, policy)
    assert rid in found, found
    return found[rid]


def quota_fleet(*quotas: Quota, cohort: str | None = "c", **kw: object) -> Snapshot:
    return fleet(
        node("n", gpus=8),
        teams=(Team("a", cohort=cohort), Team("b", cohort=cohort)),
        quotas=quotas,
        **kw,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("snap", "code", "message"),
    [
        pytest.param(
            quota_fleet(pending=[req("r", gpu_count=2)]),
            "team_quota",
            "Team a has no quota for gpu.",
            id="no-quota",
        ),
        pytest.param(
            quota_fleet(
                Quota("a", "gpu", 4, 4),
                Quota("a", "gpu", 0, 1, project="p"),
                pending=[req("r", gpu_count=2, project="p")],
            ),
            "team_quota",
            "Project p has used its gpu limit (0 of 1 GPU in use).",
            id="project-limit",
        ),
        pytest.param(
            quota_fleet(
                Quota("a", "gpu", 2, 2),
                allocations=[alloc("x", whole_claims("n", [0, 1]))],
                pending=[req("r")],
            ),
            "team_quota",
            "Team a uses all 2 GPUs of its gpu quota; it starts as the team's own work ends.",
            id="limit-without-borrowing",
        ),
        pytest.param(
            quota_fleet(
                Quota("a", "gpu", 2, 4),
                cohort=None,
                pools=(replace(EXCL, lends_unassigned=False),),
                allocations=[alloc("x", whole_claims("n", [0, 1]))],
                pending=[req("r")],
            ),
            "borrowing_limit",
            "Team a uses 2 GPUs of gpu, 2 guaranteed, and too little is free to borrow more: "
            "every gpu card is guaranteed to a team or not lent by its tier; 1 needed.",
            id="no-cohort",
        ),
        pytest.param(
            quota_fleet(
                Quota("a", "gpu", 2, 3),
                Quota("b", "gpu", 4, 4),
                allocations=[alloc("x", whole_claims("n", [0, 1, 2]))],
                pending=[req("r")],
            ),
            "borrowing_limit",
            "Team a is at its gpu limit: 3 of 3 GPUs in use, 2 guaranteed and the rest "
            "borrowed; it starts as the team's own work ends.",
            id="borrowed-to-the-limit",
        ),
        pytest.param(
            quota_fleet(
                Quota("a", "gpu", 2, 8),
                Quota("b", "gpu", 6, 6),
                allocations=[
                    alloc("x", whole_claims("n", [0, 1])),
                    alloc("y", whole_claims("n", [2, 3, 4, 5, 6, 7]), team="b"),
                ],
                pending=[req("r")],
            ),
            "borrowing_limit",
            "Team a uses 2 GPUs of gpu, 2 guaranteed, and too little is free to borrow more: "
            "0 idle in other teams' guarantees and every gpu card is guaranteed to a team or "
            "not lent by its tier; 1 needed.",
            id="cohort-lends-nothing",
        ),
    ],
)
def test_quota_waits_are_split_into_team_quota_and_borrowing_limit(
    snap: Snapshot, code: str, message: str
) -> None:
    blocker = only(snap)
    assert (blocker.code, blocker.message) == (code, message)


def test_a_full_pool_is_capacity_and_counts_the_plans_own_admissions() -> None:
    snap = fleet(node("n", gpus=4), pending=[req("first", gpu_count=4), req("r", gpu_count=1)])
    blocker = only(snap)
    assert blocker.code == "capacity"
    assert blocker.message == (
        "Pool excl has too little free for the 1 GPU-eq it needs; it starts as running work ends."
    )


def test_vgpu_memory_split_over_cards_is_fragmentation() -> None:
    snap = fleet(
        node("l4", pool="vgpu", gpus=2, free_mem=[10_240, 10_240]),
        pending=[req("r", "v20")],
    )
    blocker = only(snap)
    assert blocker.code == "fragmentation"
    assert blocker.detail["free_ge"] == 0.25


def test_free_slices_at_the_wrong_starts_are_fragmentation_not_layout() -> None:
    # Slices 0 and 4 in use: five free, but a 3g instance starts only at 0 or 4.
    snap = fleet(node("h", pool="mig", gpus=1, mig_masks=[0b0010001]), pending=[req("r", "m3")])
    assert only(snap).code == "fragmentation"


def test_a_fixed_layout_without_the_profile_is_mig_layout() -> None:
    h, devices = node("h", pool="mig", gpus=1)
    laid_out = [replace(d, mig_layout=(("1g.10gb", 7),)) for d in devices]
    snap = fleet((h, laid_out), pending=[req("r", "m3")])
    blocker = only(snap)
    assert blocker.code == "mig_layout"
    assert blocker.message == (
        "The MIG layout of pool mig's cards offers 0 free 3g.40gb instances, 1 needed."
    )


def test_capacity_only_on_an_unschedulable_node_is_node_health() -> None:
    snap = fleet(
        node("up", gpus=2),
        node("down", gpus=8, schedulable=False),
        allocations=[alloc("x", whole_claims("up", [0, 1]))],
        pending=[req("r", gpu_count=2)],
    )
    blocker = only(snap)
    assert blocker.code == "node_health"
    assert blocker.detail["nodes"] == ["down"]


def test_preempted_capacity_is_free_again_for_the_blockers() -> None:
    snap = fleet(
        node("n", gpus=4),
        teams=(Team("a", "c"), Team("v", "c")),
        quotas=(Quota("a", "gpu", 8, 16), Quota("v", "gpu", 0, 16)),
        allocations=[
            alloc("victim", whole_claims("n", [0, 1, 2, 3]), team="v", priority=1, preemptible=True)
        ],
        # "r" wants a node of its own: the card the victim leaves free is not enough.
        pending=[
            req("high", gpu_count=3, priority=3),
            req("r", gpu_count=1, priority=1, allow_shared_node=False),
        ],
    )
    planned = plan(snap, now=0.0, policy=NO_BACKFILL)
    assert [p.victim_id for p in planned.preemptions] == ["victim"]
    blocker = explain_waits(snap, planned)["r"]
    assert blocker.code == "fragmentation" and blocker.detail["free_ge"] == 1.0


def test_a_wait_behind_a_reservation_is_capacity() -> None:
    snap = fleet(
        node("n", gpus=2),
        allocations=[alloc("x", whole_claims("n", [0]))],
        pending=[req("head", gpu_count=2), req("r", gpu_count=1, max_runtime_seconds=86_400)],
    )
    found = blockers(snap, Policy())
    assert found["r"].code == "capacity"
    assert "held for a request ahead" in found["r"].message


def test_the_same_snapshot_gives_the_same_blockers() -> None:
    snap = fleet(
        node("h", pool="mig", gpus=1),
        allocations=[alloc("x", [mig_claim("h", 0, "3g.40gb", 0)], flavor="m3")],
        pending=[req(f"r{i}", "m4") for i in range(3)],
    )
    assert blockers(snap) == blockers(snap)


def test_whole_cards_spread_over_nodes_say_how_many_are_free_and_where() -> None:
    snap = fleet(
        node("n1", gpus=4),
        node("n2", gpus=4),
        allocations=[
            alloc("x", whole_claims("n1", [0, 1]), flavor="a100"),
            alloc("y", whole_claims("n2", [0, 1]), flavor="a100"),
        ],
        pending=[req("r", "a100", gpu_count=4)],
    )
    blocker = only(snap)
    assert (blocker.code, blocker.message) == (
        "fragmentation",
        "Waiting for 4 A100-80G GPUs on one node; 4 are free in pool excl but spread over 2 nodes.",
    )


def test_each_wait_gets_the_blocker_it_would_get_alone() -> None:
    # Two vGPU nodes both shapes may use, each with a quarter of one card's memory free and one
    # free card: whole cards see 2 GPU-eq free there, vGPU shares 2.5. An A100 node in use.
    l4 = {"pool": "vgpu", "model": "L4", "gpus": 2, "free_mem": [20_480, MEM]}
    snap = fleet(
        node("l4-a", **l4),  # type: ignore[arg-type]
        node("l4-b", **l4),  # type: ignore[arg-type]
        node("a100", gpus=1),
        node("h", pool="mig", gpus=1, mig_masks=[0b0010001]),
        allocations=[alloc("x", whole_claims("a100", [0]))],
        pending=[
            req("whole", "gpu", gpu_count=2),
            req("pinned", "a100", gpu_count=2),
            # The same size, the second by overriding a smaller flavor's: half the GPU-eq.
            req("shares", "v40", gpu_count=2, vgpu_memory_mib=40_960, vgpu_cores_percent=50),
            req("again", "v20", gpu_count=2, vgpu_memory_mib=40_960, vgpu_cores_percent=50),
            req("slices", "m3"),
        ],
    )
    planned = plan(snap, now=0.0, policy=NO_BACKFILL)
    together = explain_waits(snap, planned)
    assert sorted(together) == ["again", "pinned", "shares", "slices", "whole"]
    for wait in planned.waiting:
        alone = explain_waits(snap, replace(planned, waiting=(wait,)))
        assert together[wait.request_id] == alone[wait.request_id], wait.request_id
    assert (together["whole"].code, together["whole"].detail["free_ge"]) == ("fragmentation", 2)
    assert (together["shares"].code, together["shares"].detail["free_ge"]) == (
        "fragmentation",
        2.5,
    )
    assert (together["shares"].detail["demand_ge"], together["again"].detail["demand_ge"]) == (
        1.0,
        0.5,
    )
