"""The engine against a known optimum: exhaustive search on small instances.

300 seeded instances (2-6 nodes of 2 or 4 cards in an exclusive and a vGPU pool, some with host
CPU and memory; 2-10 pending requests: whole cards, vGPU shares of 3 sizes, some multi-share,
some distributed; 1-3 teams with guaranteed quotas and limits, a cohort or none; no running
work). For each, a branch-and-bound search written here, independent of the engine's code,
finds the largest GPU-equivalents (GE) that can be admitted together, under these rules:

* quota, per (team, flavor): a team without a quota for the flavor gets nothing; usage stays
  within the limit; a team without a cohort stays within its guarantee; in a cohort, the teams
  that end above their guarantee use together at most the cohort's guaranteed total (the last
  borrowed admission must still find idle quota to lend, and teams within their guarantee
  need none: the order that admits every borrower first is the one that lends most);
* placement: a whole-card request takes free cards of one node of any pool; a vGPU request of
  N shares takes N distinct cards of one vGPU node with the memory and cores free; a
  distributed whole-card request larger than a node takes whole free nodes of one pool plus one
  node for the remainder; every pod's CPU and memory must be free on its node.

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

from scheduling.engine import Node, Plan, Policy, Priority, Quota, Request, Snapshot, Team, plan

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
        q, rest = divmod(r.gpu_count, cards_per_node)
        for pool in {n[0] for n in state}:
            members = [i for i, n in enumerate(state) if n[0] == pool]
            for full in combinations(members, q):
                taken = {i: _take_whole(state[i], cards_per_node, r) for i in full}
                if any(v is None for v in taken.values()):
                    continue
                if not rest:
                    put(taken)  # type: ignore[arg-type]
                    continue
                for i in members:
                    extra = None if i in full else _take_whole(state[i], rest, r)
                    if extra is not None:
                        put({**taken, i: extra})  # type: ignore[dict-item]
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


def _quota_ok(snap: Snapshot, chosen: list[Request]) -> bool:
    """The rules of the module docstring, on the final usage of `chosen`."""
    used: defaultdict[tuple[str, str], float] = defaultdict(float)
    for r in chosen:
        used[(r.team, r.flavor)] += _ge(r)
    quota = {(q.team, q.flavor): q for q in snap.quotas if q.project is None}
    cohort_of = {t.name: t.cohort for t in snap.teams}
    lent: defaultdict[tuple[str, str], float] = defaultdict(float)  # used by borrowers
    for (team, flavor), amount in used.items():
        q = quota.get((team, flavor))
        if q is None or amount > max(q.limit, q.guaranteed) + EPS:
            return False
        if amount > q.guaranteed + EPS:
            cohort = cohort_of[team]
            if cohort is None:
                return False
            lent[(cohort, flavor)] += amount
    for (cohort, flavor), amount in lent.items():
        pool = sum(
            q.guaranteed for (t, f), q in quota.items() if f == flavor and cohort_of[t] == cohort
        )
        if amount > pool + EPS:
            return False
    return True


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


def test_oracle_respects_cohort_lending() -> None:
    """Team a borrows b's idle guarantee; the borrowers' total stays within the cohort's."""
    quotas = [Quota("a", "gpu", 1.0, 3.0), Quota("b", "gpu", 1.0, 1.0)]
    snap = _one(
        [(Node("n0", "excl", "A100-80G"), 4)],
        [_r("a2", count=2), _r("a1"), _r("b1", team="b")],
        quotas,
    )
    assert feasible(snap, {"a2", "b1"})  # a at 2 (borrowing 1): borrowers use 2 of 2
    assert not feasible(snap, {"a2", "a1"})  # a at 3: borrowers would use 3 of 2
    assert optimum(snap)[0] == pytest.approx(3.0)


def test_oracle_places_vgpu_shares_on_distinct_cards_and_gangs_in_one_pool() -> None:
    excl = Node("e0", "excl", "A100-80G")
    snap = _one(
        [(Node("v0", "vgpu", "A100-80G"), 2), (excl, 2), (replace(excl, id="e1"), 2)],
        [
            _r("v40x2", "v40", 2),
            _r("v40", "v40"),
            _r("v40b", "v40"),
            _r("g2", count=2),
            _r("gang3", count=3, distributed=True),
            _r("gang5", count=5, distributed=True),
        ],
    )
    assert feasible(snap, {"v40x2", "v40", "v40b", "gang3"})  # two halves on each vGPU card
    # ... then g2 finds one free card on e1 and shared cards on v0: a shared card is not free.
    assert not feasible(snap, {"v40x2", "v40", "v40b", "gang3", "g2"})
    assert not feasible(snap, {"gang3", "g2", "v40"})  # the gang takes e0 whole and a card of e1
    assert not feasible(snap, {"gang5"})  # 6 free cards, but only 2 nodes in a pool
    assert optimum(snap)[0] == pytest.approx(5.0)


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
    """The cohort rule charged in any order: once a team borrows, the whole cohort's usage
    (borrowers and teams within their guarantee alike) fits the cohort's guaranteed total."""
    chosen = [r for r in snap.pending if r.id in ids]
    cohort_of = {t.name: t.cohort for t in snap.teams}
    quota = {(q.team, q.flavor): q for q in snap.quotas if q.project is None}
    used: defaultdict[tuple[str, str], float] = defaultdict(float)
    for r in chosen:
        used[(r.team, r.flavor)] += _ge(r)
    for (team, flavor), amount in used.items():
        if amount <= quota[(team, flavor)].guaranteed + EPS:
            continue
        cohort = cohort_of[team]
        total = sum(v for (t, f), v in used.items() if f == flavor and cohort_of[t] == cohort)
        pool = sum(
            q.guaranteed for (t, f), q in quota.items() if f == flavor and cohort_of[t] == cohort
        )
        if total > pool + EPS:
            return False
    return True


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
