"""Engine mutants that the properties here catch, and the real engine passes.

Three mutants are built through the public `Policy`, not by patching the engine:

* no-preemption: `Policy(enable_preemption=False)`;
* no-backfill: `Policy(enable_backfill=False)`;
* age-only queue: `Policy(queue_order=("age",))` (priority and fair share ignored).

Each property is checked on fixed instances drawn with `random.Random(seed)` for the seeds in
`SEEDS` (no hypothesis: the instances are the same on every run). The real engine must pass
every property on every instance; each mutant must fail at least one, and the one it was built
to break.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from scheduling.engine.planner import plan
from scheduling.engine.types import Plan, Policy, Priority, Quota, Snapshot, Team

from .builders import alloc, fleet, node, req, whole_claims

SEEDS = tuple(range(6))
NOW = 1_000.0
Property = Callable[[Policy, int], str | None]


def _cycle(snap: Snapshot, policy: Policy) -> Plan:
    return plan(snap, now=NOW, policy=policy)


def liveness_by_preemption(policy: Policy, seed: int) -> str | None:
    """A high-priority request within its guarantee, facing a pool full of borrowed
    preemptible work, is admitted in the same cycle."""
    rng = random.Random(seed)
    gpus = rng.choice((2, 4, 8))
    nodes = [node(f"n{i}", gpus=gpus) for i in range(rng.randint(1, 3))]
    allocs = [
        alloc(
            f"v-{n.id}-{i}",
            whole_claims(n.id, [i]),
            team="v",
            priority=Priority.LOW,
            preemptible=True,
            borrowed=True,
        )
        for n, _ in nodes
        for i in range(gpus)
    ]
    want = rng.randint(1, gpus)
    snap = fleet(
        *nodes,
        teams=(Team("a", "c"), Team("v", "c")),
        quotas=(Quota("a", "gpu", 64, 64), Quota("v", "gpu", 0, 64)),
        allocations=allocs,
        pending=[req("hi", team="a", gpu_count=want, priority=Priority.HIGH)],
    )
    got = _cycle(snap, policy)
    if [a.request_id for a in got.admissions] != ["hi"]:
        return f"guaranteed high-priority request for {want} GPUs not admitted over borrowed work"
    return None


def no_priority_inversion(policy: Policy, seed: int) -> str | None:
    """Two requests of one team and shape wait, only one fits: the higher priority one runs,
    although the lower one is older."""
    rng = random.Random(seed)
    gpus = rng.choice((2, 4, 8))
    free = rng.randint(1, gpus)
    held = [alloc("held", whole_claims("n", range(free, gpus)), team="v")] if free < gpus else []
    low = rng.choice((Priority.BATCH, Priority.LOW, Priority.NORMAL))
    snap = fleet(
        node("n", gpus=gpus),
        teams=(Team("a", "c"), Team("v", "c")),
        quotas=(Quota("a", "gpu", 64, 64), Quota("v", "gpu", 64, 64)),
        allocations=held,
        pending=[
            req("low", team="a", gpu_count=free, priority=low, submitted_at=0.0),
            req("high", team="a", gpu_count=free, priority=low + 1, submitted_at=50.0),
        ],
    )
    got = [a.request_id for a in _cycle(snap, policy).admissions]
    if got != ["high"]:
        return f"admitted {got} where only the higher-priority request fits"
    return None


def fair_share_first(policy: Policy, seed: int) -> str | None:
    """Two teams of equal weight each wait with one request, only one fits: the team holding
    nothing goes before the team already holding GPUs, although the other's request is older."""
    rng = random.Random(seed)
    gpus = rng.choice((4, 8))
    free = rng.randint(1, gpus // 2)
    snap = fleet(
        node("n", gpus=gpus),
        teams=(Team("a", "c"), Team("b", "c")),
        quotas=(Quota("a", "gpu", 32, 32), Quota("b", "gpu", 32, 32)),
        allocations=[alloc("a-running", whole_claims("n", range(free, gpus)), team="a")],
        pending=[
            req("a-new", team="a", gpu_count=free, submitted_at=0.0),
            req("b-new", team="b", gpu_count=free, submitted_at=50.0),
        ],
    )
    got = [a.request_id for a in _cycle(snap, policy).admissions]
    if got != ["b-new"]:
        return f"admitted {got} where the team with the lower share should go first"
    return None


def backfill_around_the_head(policy: Policy, seed: int) -> str | None:
    """The head needs a whole node that running work frees at T: a short job that ends before T
    runs in the hole now, and no admission on that node ends after T (the head is not delayed)."""
    rng = random.Random(seed)
    gpus = rng.choice((4, 8))
    busy = rng.randint(1, gpus - 2)  # room for the short and the long job side by side
    ends_in = rng.choice((1_800.0, 3_600.0, 7_200.0))
    running = alloc(
        "running",
        whole_claims("n", range(busy)),
        team="v",
        started_at=NOW,
        max_runtime_seconds=ends_in,
    )
    snap = fleet(
        node("n", gpus=gpus),
        teams=(Team("a", "c"), Team("v", "c")),
        quotas=(Quota("a", "gpu", 64, 64), Quota("v", "gpu", 64, 64)),
        allocations=[running],
        pending=[
            req("head", team="a", gpu_count=gpus, submitted_at=0.0),
            req("short", team="a", submitted_at=10.0, max_runtime_seconds=ends_in / 2),
            req("long", team="a", submitted_at=20.0, max_runtime_seconds=10 * ends_in),
        ],
    )
    got = _cycle(snap, policy)
    admitted = {a.request_id for a in got.admissions}
    if "short" not in admitted:
        return "a short job that ends before the head can start was not backfilled"
    runtime = {r.id: r.max_runtime_seconds for r in snap.pending}
    late = sorted(i for i in admitted if NOW + runtime[i] > NOW + ends_in)
    if late:
        return f"{late} run past the time the head could start, delaying it"
    return None


PROPERTIES: dict[str, Property] = {
    "liveness_by_preemption": liveness_by_preemption,
    "no_priority_inversion": no_priority_inversion,
    "fair_share_first": fair_share_first,
    "backfill_around_the_head": backfill_around_the_head,
}

# mutant -> (policy, the property it was built to break)
MUTANTS: dict[str, tuple[Policy, str]] = {
    "no_preemption": (Policy(enable_preemption=False), "liveness_by_preemption"),
    "no_backfill": (Policy(enable_backfill=False), "backfill_around_the_head"),
    "age_only_queue": (Policy(queue_order=("age",)), "no_priority_inversion"),
}


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", sorted(PROPERTIES))
def test_engine_passes(name: str, seed: int) -> None:
    assert PROPERTIES[name](Policy(), seed) is None


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_mutant_fails(mutant: str) -> None:
    policy, target = MUTANTS[mutant]
    failures = {
        name: [msg for seed in SEEDS if (msg := prop(policy, seed)) is not None]
        for name, prop in PROPERTIES.items()
    }
    caught = sorted(name for name, msgs in failures.items() if msgs)
    assert caught, f"mutant {mutant} passes every property"
    assert target in caught, f"mutant {mutant} passes {target}; caught by {caught}"
