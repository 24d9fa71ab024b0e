"""The engine against a known optimum: exhaustive search on small instances.

300 seeded instances (2-6 nodes of 2 or 4 cards in an exclusive and a vGPU pool, some with host
CPU and memory; 2-10 pending requests: whole cards, vGPU shares of 3 sizes, some multi-share,
some distributed; 1-3 teams with guaranteed quotas and limits, a cohort or none; no running
work). For each, a branch-and-bound search written here, independent of the engine's code,
finds the largest GPU-equivalents (GE) that can be admitted together, under these rules:

* quota, per (team, flavor): a team without a quota for the flavor gets nothing; usage stays
  within the limit; a team above its guarantee borrows, first from its group's guarantees (its
  cohort's, or its own without a cohort), then from the fleet's unassigned capacity: the cards
  of the pools a flavor runs on less every guarantee of the flavors sharing those cards (the
  vGPU flavors share the vGPU pool). What the borrowers of a group use beyond the group's
  guaranteed total, summed over groups and over the flavors sharing the cards, stays within
  that unassigned capacity (teams within their guarantee need no lending: the order that
  admits every borrower first is the one that lends most);
* placement: a whole-card request takes free cards of one node of any pool; a vGPU request of
  N shares takes N distinct cards of one vGPU node with the memory and cores free; a
  distributed whole-card request larger than a node runs as ranks of one template: the fewest
  nodes of one pool that hold it, each taking the same number of free cards (a count those
  nodes cannot split evenly does not fit); every pod's CPU and memory must be free on its
  node.

The engine's single cycle (default policy) must admit at least `BOUND` x the optimum on every
instance; the worst ratio measured over the 300 seeds is in docs/engine.md ("Against a known
optimum"). Every admitted set is also checked against the same rules (the engine never beats
the optimum by breaking one).
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, replace
from itertools import combinations

import pytest

from scheduling.engine.planner import plan
from scheduling.engine.types import Node, Plan, Policy, Priority, Quota, Request, Snapshot, Team

from .builders import EXCL, FLAVOR, MEM, VGPU, fleet, node

SEEDS = range(300)
#: The engine admits at least this share of the optimum's GE on every instance. Measured worst
#: case over SEEDS: see docs/engine.md.
BOUND = 0.25
#: ... and at least this share of the sum of the optima over all instances.
TOTAL_BOUND = 0.9
#: With every request at one priority (queue order by fair share and age alone).
ONE_PRIORITY_BOUND = 1 / 3
#: Instances where the engine cannot pack the optimum's requests even offered them alone.
PACKING_LOSSES_MAX = 8
NOW = 1_000.0
EPS = 1e-9
BIG = 1 << 40
FLAVOR_IDS = ("gpu", "v10", "v20", "v40")


# ----------------------------------------------------------------------------- instances


def _instance(seed: int, *, one_priority: bool = False) -> Snapshot:
    rng = random.Random(seed)
    cards = rng.choice((2, 4))
    specs = []
    for i in range(rng.randint(2, 6)):
        pool = "excl" if i == 0 or rng.random() < 0.5 else "vgpu"
        spec_node, devs = node(f"n{i}", pool=pool, gpus=cards)
        if rng.random() < 0.4:
            spec_node = replace(
                spec_node,
                cpu_millicores=rng.choice((4_000, 8_000, 16_000)),
                memory_mib=rng.choice((32_768, 65_536, 131_072)),
            )
        specs.append((spec_node, devs))
    cohort = "c" if rng.random() < 0.7 else None
    teams = tuple(Team(t, cohort=cohort) for t in ("a", "b", "c")[: rng.randint(1, 3)])
    quotas = []
    for t in teams:
        for f in FLAVOR_IDS:
            if rng.random() < 0.1:
                continue  # no quota for this flavor
            guaranteed = rng.choice((0.0, 0.5, 1.0, 2.0, 4.0))
            quotas.append(Quota(t.name, f, guaranteed, guaranteed + rng.choice((0.0, 1.0, 4.0))))
    pending = []
    for j in range(rng.randint(2, 10)):
        flavor = rng.choice(("gpu", "gpu", "v10", "v20", "v40"))
        distributed = flavor == "gpu" and rng.random() < 0.2
        if flavor == "gpu":
            count = rng.randint(1, 2 * cards if distributed else cards)
        else:
            count = rng.choice((1, 1, 2))
        host = rng.random() < 0.5
        pending.append(
            Request(
                id=f"r{j}",
                team=rng.choice(teams).name,
                flavor=flavor,
                submitted_at=float(rng.randint(0, 900)),
                gpu_count=count,
                priority=Priority.HIGH
                if rng.random() < 0.2 and not one_priority
                else Priority.NORMAL,
                distributed=distributed,
                cpu_millicores=rng.choice((1_000, 4_000, 8_000)) if host else 0,
                memory_mib=rng.choice((8_192, 32_768, 65_536)) if host else 0,
            )
        )
    return fleet(
        *specs, pools=(EXCL, VGPU), teams=teams, quotas=quotas, pending=pending,
        flavors=tuple(FLAVOR[f] for f in FLAVOR_IDS),
    )  # fmt: skip


# ----------------------------------------------------------------------------- the oracle

# A card: (whole-free, memory free MiB, cores free %); a whole-free card has no share on it.
Card = tuple[bool, int, int]
# A node: (pool, CPU free, memory free, cards sorted); order of nodes and cards is irrelevant.
NodeState = tuple[str, int, int, tuple[Card, ...]]
State = tuple[NodeState, ...]


def _ge(r: Request) -> float:
    return r.gpu_count * FLAVOR[r.flavor].gpu_equivalent


def _start_state(snap: Snapshot) -> State:
    cards: defaultdict[str, list[Card]] = defaultdict(list)
    for d in snap.devices:
        cards[d.node_id].append((True, d.memory_free_mib, d.cores_free_percent))
    return tuple(
        sorted(
            (
                n.pool,
                BIG if n.cpu_millicores is None else n.cpu_millicores,
                BIG if n.memory_mib is None else n.memory_mib,
                tuple(sorted(cards[n.id])),
            )
            for n in snap.nodes
        )
    )


def _host_left(n: NodeState, r: Request) -> tuple[int, int] | None:
    cpu, mem = n[1] - r.cpu_millicores, n[2] - r.memory_mib
    return None if cpu < 0 or mem < 0 else (cpu, mem)


def _take_whole(n: NodeState, k: int, r: Request) -> NodeState | None:
    """`n` after a pod of `r` takes `k` whole free cards (None if it cannot)."""
    host = _host_left(n, r)
    free = [i for i, c in enumerate(n[3]) if c[0] and c[1] == MEM and c[2] == 100]
    if host is None or len(free) < k:
        return None
    cards = list(n[3])
    for i in free[:k]:
        cards[i] = (False, 0, 0)
    return (n[0], *host, tuple(sorted(cards)))


def _share_options(n: NodeState, r: Request) -> Iterator[NodeState]:
    """`n` after `r` takes gpu_count shares on distinct cards, one result per distinct choice."""
    host = _host_left(n, r)
    if host is None or n[0] != "vgpu":
        return
    f = FLAVOR[r.flavor]
    fits = [i for i, c in enumerate(n[3]) if c[1] >= f.memory_mib and c[2] >= f.cores_percent]
    seen: set[NodeState] = set()
    for chosen in combinations(fits, r.gpu_count):
        cards = list(n[3])
        for i in chosen:
            whole, mem, cores = cards[i]
            cards[i] = (False, mem - f.memory_mib, cores - f.cores_percent)
        out = (n[0], *host, tuple(sorted(cards)))
        if out not in seen:
            seen.add(out)
            yield out


def _placements(state: State, r: Request) -> set[State]:
    """Every distinct fleet state after placing `r` (empty: it does not fit)."""
    out: set[State] = set()

    def put(changed: dict[int, NodeState]) -> None:
        out.add(tuple(sorted(changed.get(i, n) for i, n in enumerate(state))))

    cards_per_node = len(state[0][3])
    if FLAVOR[r.flavor].kind == "whole" and r.distributed and r.gpu_count > cards_per_node:
        nodes = -(-r.gpu_count // cards_per_node)
        if r.gpu_count % nodes:
            return out  # ranks of one template hold the same card count
        for pool in {n[0] for n in state}:
            members = [i for i, n in enumerate(state) if n[0] == pool]
            for chosen in combinations(members, nodes):
                taken = {i: _take_whole(state[i], r.gpu_count // nodes, r) for i in chosen}
                if all(v is not None for v in taken.values()):
                    put(taken)  # type: ignore[arg-type]
        return out
    for i, n in enumerate(state):
        if FLAVOR[r.flavor].kind == "whole":
            after = _take_whole(n, r.gpu_count, r)
            if after is not None:
                put({i: after})
        else:
            for after in _share_options(n, r):
                put({i: after})
    return out


def _card_group(flavor: str) -> str:
    """The pool whose cards a flavor of these instances runs on."""
    return "excl" if FLAVOR[flavor].kind == "whole" else "vgpu"


def _unassigned(snap: Snapshot) -> dict[str, float]:
    """Per pool: its cards less every guarantee of the flavors that run on them."""
    pool_of = {n.id: n.pool for n in snap.nodes}
    out: defaultdict[str, float] = defaultdict(float)
    for d in snap.devices:
        out[pool_of[d.node_id]] += 1.0
    for q in snap.quotas:
        if q.project is None:
            out[_card_group(q.flavor)] -= q.guaranteed
    return {pool: max(0.0, v) for pool, v in out.items()}


def _lent_beyond_groups(snap: Snapshot, used: dict[tuple[str, str], float], *, whole_group: bool):
    """Per pool: what groups with a borrower use beyond their guaranteed total. Counting the
    borrowers alone (`whole_group` False) is the most a cycle can lend; counting every team of
    the group is what a cycle lends when it charged the group's work within guarantee first."""
    quota = {(q.team, q.flavor): q for q in snap.quotas if q.project is None}
    group_of = {t.name: t.cohort or f"team:{t.name}" for t in snap.teams}
    borrowers = {(t, f) for (t, f), v in used.items() if v > quota[(t, f)].guaranteed + EPS}
    borrowing = {(group_of[t], f) for t, f in borrowers}
    beyond: defaultdict[str, float] = defaultdict(float)
    for group, flavor in borrowing:
        members = [t for t, g in group_of.items() if g == group]
        total = sum(
            used.get((t, flavor), 0.0) for t in members if whole_group or (t, flavor) in borrowers
        )
        guaranteed = sum(quota[(t, flavor)].guaranteed for t in members if (t, flavor) in quota)
        beyond[_card_group(flavor)] += max(0.0, total - guaranteed)
    return beyond


def _usage(chosen: list[Request]) -> dict[tuple[str, str], float]:
    used: defaultdict[tuple[str, str], float] = defaultdict(float)
    for r in chosen:
        used[(r.team, r.flavor)] += _ge(r)
    return used


def _quota_ok(snap: Snapshot, chosen: list[Request], *, whole_group: bool = False) -> bool:
    """The rules of the module docstring, on the final usage of `chosen`."""
    used = _usage(chosen)
    quota = {(q.team, q.flavor): q for q in snap.quotas if q.project is None}
    for key, amount in used.items():
        q = quota.get(key)
        if q is None or amount > max(q.limit, q.guaranteed) + EPS:
            return False
    unassigned = _unassigned(snap)
    beyond = _lent_beyond_groups(snap, used, whole_group=whole_group)
    return all(v <= unassigned.get(pool, 0.0) + EPS for pool, v in beyond.items())


@dataclass
class _Search:
    snap: Snapshot
    requests: list[Request]
    best: float = 0.0
    best_set: tuple[str, ...] = ()

    def run(self, i: int, state: State, chosen: list[Request], ge: float) -> None:
        if ge > self.best + EPS:
            self.best, self.best_set = ge, tuple(r.id for r in chosen)
        if i == len(self.requests):
            return
        if ge + sum(_ge(r) for r in self.requests[i:]) <= self.best + EPS:
            return  # cannot beat the best found
        r = self.requests[i]
        if _quota_ok(self.snap, [*chosen, r]):
            for after in sorted(_placements(state, r)):
                self.run(i + 1, after, [*chosen, r], ge + _ge(r))
        self.run(i + 1, state, chosen, ge)


def optimum(snap: Snapshot) -> tuple[float, tuple[str, ...]]:
    """The largest GE admissible together, and one set of request ids that reaches it."""
    requests = sorted(snap.pending, key=lambda r: (-_ge(r), r.id))
    search = _Search(snap, requests)
    search.run(0, _start_state(snap), [], 0.0)
    return search.best, search.best_set


def feasible(snap: Snapshot, ids: set[str]) -> bool:
    """Whether the requests `ids` can all be admitted together under the oracle's rules."""
    chosen = [r for r in snap.pending if r.id in ids]
    if not _quota_ok(snap, chosen):
        return False
    chosen.sort(key=lambda r: (-_ge(r), r.id))

    def place(i: int, state: State) -> bool:
        return i == len(chosen) or any(place(i + 1, s) for s in _placements(state, chosen[i]))

    return place(0, _start_state(snap))


def admitted_ge(snap: Snapshot, p: Plan) -> float:
    ids = {a.request_id for a in p.admissions}
    return sum(_ge(r) for r in snap.pending if r.id in ids)


# ------------------------------------------------------------------ the oracle's own checks


def _one(
    nodes: list[tuple[Node, int]], pending: list[Request], quotas: list[Quota] | None = None
) -> Snapshot:
    return fleet(
        *[node(n.id, pool=n.pool, gpus=g) for n, g in nodes],
        pools=(EXCL, VGPU),
        teams=(Team("a", cohort="c"), Team("b", cohort="c")),
        quotas=quotas,
        pending=pending,
        flavors=tuple(FLAVOR[f] for f in FLAVOR_IDS),
    )


def _r(rid: str, flavor: str = "gpu", count: int = 1, team: str = "a", **kw: object) -> Request:
    return replace(Request(rid, team, flavor, 0.0, gpu_count=count), **kw)  # type: ignore[arg-type]


def test_oracle_packs_what_first_fit_in_order_would_not() -> None:
    """Two 2-card nodes, requests of 1, 2 and 1 cards: all 4 cards fit, one of 2 per node."""
    snap = _one(
        [(Node("n0", "excl", "A100-80G"), 2), (Node("n1", "excl", "A100-80G"), 2)],
        [_r("a1"), _r("b2", count=2), _r("c1"), _r("d2", count=2)],
    )
    best, ids = optimum(snap)
    assert best == pytest.approx(4.0)
    assert feasible(snap, set(ids))
    assert not feasible(snap, {"a1", "b2", "c1", "d2"})


def _three_teams(quotas: list[Quota], pending: list[Request]) -> Snapshot:
    """One 4-card node; teams a and b share a cohort, x has none."""
    return fleet(
        node("n0", pool="excl", gpus=4),
        pools=(EXCL, VGPU),
        teams=(Team("a", cohort="c"), Team("b", cohort="c"), Team("x")),
        quotas=quotas,
        pending=pending,
        flavors=tuple(FLAVOR[f] for f in FLAVOR_IDS),
    )


def test_oracle_respects_cohort_lending() -> None:
    """Guarantees take all 4 cards: team a borrows b's idle guarantee and nothing else."""
    quotas = [Quota("a", "gpu", 1.0, 3.0), Quota("b", "gpu", 1.0, 1.0), Quota("x", "gpu", 2.0, 4.0)]
    pending = [_r("a2", count=2), _r("a1"), _r("b1", team="b"), _r("x3", count=3, team="x")]
    snap = _three_teams(quotas, pending)
    assert feasible(snap, {"a2", "b1"})  # a at 2 (borrowing 1): borrowers use 2 of 2
    assert not feasible(snap, {"a2", "a1"})  # a at 3: borrowers would use 3 of 2
    assert not feasible(snap, {"x3"})  # x has no cohort and no card is unassigned
    assert optimum(snap)[0] == pytest.approx(3.0)


def test_oracle_lends_unassigned_cards_to_every_group() -> None:
    """One card is nobody's guarantee: a cohort or a team without one may borrow it, once."""
    quotas = [Quota("a", "gpu", 1.0, 3.0), Quota("b", "gpu", 1.0, 1.0), Quota("x", "gpu", 1.0, 4.0)]
    pending = [
        _r("a2", count=2),
        _r("a1"),
        _r("x2", count=2, team="x"),
        _r("x3", count=3, team="x"),
    ]
    snap = _three_teams(quotas, pending)
    assert feasible(snap, {"a2", "a1"})  # the cohort uses 3 of its 2 guaranteed and 1 lent
    assert feasible(snap, {"a2", "x2"})  # x uses 2 of its 1 guaranteed and 1 lent
    assert not feasible(snap, {"x3"})  # x would borrow 2: one card is lent, not two
    assert optimum(snap)[0] == pytest.approx(4.0)


def test_oracle_places_vgpu_shares_on_distinct_cards_and_gangs_in_one_pool() -> None:
    excl = Node("e0", "excl", "A100-80G")
    snap = _one(
        [(Node("v0", "vgpu", "A100-80G"), 2), (excl, 2), (replace(excl, id="e1"), 2)],
        [
            _r("v40x2", "v40", 2),
            _r("v40", "v40"),
            _r("v40b", "v40"),
            _r("g2", count=2),
            _r("gang4", count=4, distributed=True),
            _r("gang3", count=3, distributed=True),
            _r("gang6", count=6, distributed=True),
        ],
    )
    assert feasible(snap, {"v40x2", "v40", "v40b", "gang4"})  # two halves on each vGPU card
    # ... then g2 finds shared cards on v0 and none free on e0, e1: a shared card is not free.
    assert not feasible(snap, {"v40x2", "v40", "v40b", "gang4", "g2"})
    assert not feasible(snap, {"gang3"})  # 2 ranks of 2-card nodes cannot hold 3 cards evenly
    assert not feasible(snap, {"gang6"})  # 6 free cards, but only 2 nodes in a pool
    assert optimum(snap)[0] == pytest.approx(6.0)


# ----------------------------------------------------------------------------- the engine


def _ratios(*, one_priority: bool = False) -> list[tuple[float, int, float, float]]:
    """(engine GE / optimum GE, seed, engine GE, optimum GE) per instance."""
    out = []
    for seed in SEEDS:
        snap = _instance(seed, one_priority=one_priority)
        best, _ = optimum(snap)
        p = plan(snap, now=NOW, policy=Policy())
        got = admitted_ge(snap, p)
        assert feasible(snap, {a.request_id for a in p.admissions}), f"seed {seed}"
        out.append((got / best if best > EPS else 1.0, seed, got, best))
    return out


def _cohort_wide_ok(snap: Snapshot, ids: tuple[str, ...]) -> bool:
    """The lending rule charged in any order: once a team borrows, its whole group's usage
    (borrowers and teams within their guarantee alike) beyond the group's guarantees is lent."""
    return _quota_ok(snap, [r for r in snap.pending if r.id in ids], whole_group=True)


def explain(snap: Snapshot) -> str | None:
    """Why the engine admits less than the optimum on `snap` (None: it does not).

    * "queue order": offered the optimum's requests alone, the engine admits them all; with
      the others it admitted requests earlier in its queue order (priority, fair share, age)
      that took the quota or the room a larger set needed. A cycle takes the queue in order
      and never leaves a request out to make room for later ones.
    * "lending order": the optimum's set is within quota only if its borrowers are admitted
      before their cohort-mates' work within guarantee; in the engine's order the cohort has
      already charged that work and has nothing left to lend.
    * "packing": offered the optimum's requests alone, the engine leaves some waiting for
      capacity: a vGPU share put on the tightest card (best fit) takes the card a later
      multi-share request needed, or a pod goes to the node whose CPU or memory a later
      request needed (the placement scores do not look ahead).
    """
    best, ids = optimum(snap)
    if admitted_ge(snap, plan(snap, now=NOW, policy=Policy())) >= best - EPS:
        return None
    alone = replace(snap, pending=tuple(r for r in snap.pending if r.id in ids))
    p = plan(alone, now=NOW, policy=Policy())
    if admitted_ge(alone, p) >= best - EPS:
        return "queue order"
    codes = {w.code for w in p.waiting}
    if codes == {"quota"} and not _cohort_wide_ok(snap, ids):
        return "lending order"
    if codes <= {"capacity", "reserved"}:
        return "packing"
    return f"unexplained: {sorted(codes)}"


def test_engine_admits_within_the_stated_bound_of_the_optimum() -> None:
    ratios = _ratios()
    below = [r for r in ratios if r[0] < BOUND - EPS]
    assert not below, f"below {BOUND} x optimum (ratio, seed, engine GE, optimum GE): {below}"
    total = sum(r[2] for r in ratios) / sum(r[3] for r in ratios)
    assert total >= TOTAL_BOUND, f"engine admits {total:.3f} of the optimum's GE in total"
    # The comparison is not vacuous: most instances have room for something.
    assert sum(1 for r in ratios if r[3] > 0) > 0.8 * len(ratios)


def test_engine_admits_within_the_stated_bound_with_one_priority_class() -> None:
    ratios = _ratios(one_priority=True)
    below = [r for r in ratios if r[0] < ONE_PRIORITY_BOUND - EPS]
    assert not below, f"below {ONE_PRIORITY_BOUND} x optimum: {below}"


def test_every_shortfall_is_an_explained_kind() -> None:
    kinds: defaultdict[str, list[int]] = defaultdict(list)
    for seed in SEEDS:
        why = explain(_instance(seed))
        if why is not None:
            kinds[why].append(seed)
    assert set(kinds) <= {"queue order", "lending order", "packing"}, dict(kinds)
    # Packing is the engine's own choice of cards and nodes: it loses on few instances.
    assert len(kinds["packing"]) <= PACKING_LOSSES_MAX, dict(kinds)
