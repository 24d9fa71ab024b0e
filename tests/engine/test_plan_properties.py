"""Properties of a whole cycle on product-shaped instances (up to 50 nodes, 200 pending).

Beyond safety: the engine must not be lazy (liveness), must place only where the rules allow
(placement legality), must keep team and project quotas, and must preempt only for strictly
higher priority (or to reclaim a guarantee from borrowed work, docs/engine.md) and only when
the request could not run otherwise.  Plans are checked against `fleet_model`, a second,
independent reading of the rules.

Instances are built as the portal builds its snapshot: every request pinned to its flavor's
pool (node selector on the pool label) and GPU model; pools carry a taint admission tolerates;
some nodes carry an extra taint, a zone label or are cordoned; some requests select a zone,
tolerate the extra taint or want a node of their own.  Hypothesis draws the sizes and a seed;
the seed draws the rest, which keeps each example fast.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from scheduling.engine.planner import plan
from scheduling.engine.types import (
    MIG_PROFILES,
    Allocation,
    DeviceClaim,
    Flavor,
    GpuDevice,
    Node,
    Plan,
    Policy,
    Pool,
    Quota,
    Request,
    Snapshot,
    Taint,
    Team,
    mig_bits,
    vgpu_equivalent,
)

from .fleet_model import FleetModel

POOL_LABEL = "gpu-portal/pool"
NOW = 100_000.0
MEM = 81_920
KINDS = ("job", "notebook", "service")
SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
EPS = 1e-9


@dataclass(frozen=True)
class Instance:
    snap: Snapshot
    plan: Plan


def _flavors(pool: str, sharing: str, model: str) -> list[Flavor]:
    if sharing == "exclusive":
        return [Flavor(f"{pool}-card", "whole", model)]
    if sharing == "vgpu":
        return [
            Flavor(f"{pool}-{mem // 1024}g", "vgpu", model, mem, cores, None, ge)
            for mem, cores in ((10_240, 12), (20_480, 25), (40_960, 50))
            for ge in (round(vgpu_equivalent(mem, cores, MEM), 4),)
        ]
    return [
        Flavor(f"{pool}-{p}", "mig", model, mig_profile=p, gpu_equivalent=round(s / 7, 4))
        for p, s in (("1g.10gb", 1), ("2g.20gb", 2), ("3g.40gb", 3))
    ]


def build(
    seed: int, n_nodes: int, n_pending: int, n_teams: int, fill: float, project_quotas: bool
) -> Snapshot:
    rnd = random.Random(seed)
    shared_taint = Taint("nvidia.com/gpu", "present", "NoSchedule")
    pools: list[Pool] = []
    flavors: list[Flavor] = []
    pool_flavors: dict[str, list[Flavor]] = {}
    for i, sharing in enumerate(
        rnd.sample(["exclusive", "vgpu", "mig", "exclusive"], rnd.randint(1, 4))
    ):
        name = f"p{i}-{sharing}"
        model = rnd.choice(["A100-80G", "H100-80G"])
        kinds = tuple(sorted(rnd.sample(KINDS, rnd.randint(2, 3))))
        pools.append(
            Pool(
                name,
                tier=rnd.randint(0, 2),
                sharing=sharing,  # type: ignore[arg-type]
                scoring=rnd.choice(["binpack", "spread"]),
                allowed_kinds=kinds,
                node_selector=((POOL_LABEL, name),),
                taints=(shared_taint,),
            )
        )
        pool_flavors[name] = _flavors(name, sharing, model)
        flavors += pool_flavors[name]
    pool_model: dict[str, str] = {}
    for p in pools:
        pool_model[p.name] = pool_flavors[p.name][0].gpu_model or "A100-80G"

    nodes: list[Node] = []
    devices: list[GpuDevice] = []
    for i in range(n_nodes):
        pool = rnd.choice(pools)
        model = pool_model[pool.name] if rnd.random() < 0.9 else "L4"
        labels = {POOL_LABEL: pool.name, "zone": rnd.choice("ab")}
        if rnd.random() < 0.05:
            del labels[POOL_LABEL]  # a node missing its pool label takes nothing of the pool
        taints = [shared_taint]
        if rnd.random() < 0.15:
            taints.append(Taint("maintenance", "", rnd.choice(["NoSchedule", "NoExecute"])))
        nid = f"n{i:02d}"
        nodes.append(
            Node(
                nid,
                pool.name,
                model,
                tuple(sorted(labels.items())),
                tuple(taints),
                rnd.random() > 0.05,
            )
        )
        for d in range(rnd.choice([1, 2, 4, 8, 8])):
            devices.append(GpuDevice(nid, d, MEM, MEM, 100, pool.sharing == "mig"))

    teams = [Team(f"t{i}", cohort=rnd.choice(["c1", "c1", None])) for i in range(n_teams)]
    quotas: list[Quota] = []
    for t in teams:
        for f in flavors:
            g = rnd.choice([0, 2, 8, 16, 32, 64]) * f.gpu_equivalent
            quotas.append(Quota(t.name, f.id, g, g + rnd.choice([0, 8, 32, 64]) * f.gpu_equivalent))
            if project_quotas and rnd.random() < 0.3:
                quotas.append(
                    Quota(t.name, f.id, 0.0, rnd.choice([1, 2, 4]) * f.gpu_equivalent, project="p1")
                )

    # Running work, placed legally on the empty devices (the snapshot's device state follows).
    state = {(d.node_id, d.index): d for d in devices}
    allocations: list[Allocation] = []
    node_pool = {n.id: n.pool for n in nodes}
    exclusive_nodes: set[str] = set()
    for n in nodes:
        if rnd.random() > fill:
            continue
        devs = sorted(i for (nid, i) in state if nid == n.id)
        pool = next(p for p in pools if p.name == node_pool[n.id])
        if pool.sharing == "exclusive" and rnd.random() < 0.15:
            claims = tuple(DeviceClaim(n.id, i) for i in devs)
            flavor = pool_flavors[pool.name][0]
            allocations.append(
                _alloc(rnd, len(allocations), teams, flavor, claims, len(claims), True)
            )
            exclusive_nodes.add(n.id)
            for i in devs:
                state[(n.id, i)] = _with(state[(n.id, i)], whole_allocated=True)
            continue
        for i in devs:
            if rnd.random() > fill:
                continue
            flavor = rnd.choice(pool_flavors[pool.name])
            dev = state[(n.id, i)]
            if flavor.kind == "whole":
                claims = (DeviceClaim(n.id, i),)
                state[(n.id, i)] = _with(dev, whole_allocated=True)
                allocations.append(_alloc(rnd, len(allocations), teams, flavor, claims, 1, False))
                continue
            for _ in range(rnd.randint(1, 4)):
                dev = state[(n.id, i)]
                if flavor.kind == "vgpu":
                    if (
                        dev.memory_free_mib < flavor.memory_mib
                        or dev.cores_free_percent < flavor.cores_percent
                    ):
                        break
                    claims = (DeviceClaim(n.id, i, False, flavor.memory_mib, flavor.cores_percent),)
                    state[(n.id, i)] = _with(
                        dev,
                        memory_free_mib=dev.memory_free_mib - flavor.memory_mib,
                        cores_free_percent=dev.cores_free_percent - flavor.cores_percent,
                    )
                else:
                    assert flavor.mig_profile is not None
                    prof = MIG_PROFILES[flavor.mig_profile]
                    start = next(
                        (s for s in prof.starts if not dev.mig_used_mask & mig_bits(prof.name, s)),
                        None,
                    )
                    if start is None:
                        break
                    claims = (DeviceClaim(n.id, i, False, mig_profile=prof.name, mig_start=start),)
                    state[(n.id, i)] = _with(
                        dev, mig_used_mask=dev.mig_used_mask | mig_bits(prof.name, start)
                    )
                allocations.append(_alloc(rnd, len(allocations), teams, flavor, claims, 1, False))

    pending: list[Request] = []
    for i in range(n_pending):
        pool = rnd.choice(pools)
        f = rnd.choice(pool_flavors[pool.name])
        selector: tuple[tuple[str, str], ...] = ((POOL_LABEL, pool.name),)
        if rnd.random() < 0.15:
            selector += (("zone", rnd.choice("ab")),)
        count = rnd.choice([1, 1, 1, 2, 4, 8]) if f.kind == "whole" else rnd.choice([1, 1, 1, 2])
        priority = rnd.randint(0, 4)
        pending.append(
            Request(
                id=f"r{i:03d}",
                team=rnd.choice(teams).name,
                project=rnd.choice(["p0", "p1"]),
                flavor=f.id,
                submitted_at=rnd.uniform(0, NOW),
                gpu_count=count,
                kind=rnd.choice(KINDS),
                priority=priority,
                is_preemptible=priority <= 1,
                allow_shared_node=rnd.random() > 0.1,
                pinned_model=f.gpu_model,
                max_runtime_seconds=rnd.choice([600.0, 3_600.0, 86_400.0]),
                node_selector=selector,
                tolerations=("maintenance",) if rnd.random() < 0.2 else (),
            )
        )
    return Snapshot(
        pools=tuple(pools),
        nodes=tuple(nodes),
        devices=tuple(state.values()),
        flavors=tuple(flavors),
        teams=tuple(teams),
        quotas=tuple(quotas),
        allocations=tuple(allocations),
        pending=tuple(pending),
    )


def _with(d: GpuDevice, **changes: object) -> GpuDevice:
    from dataclasses import replace

    return replace(d, **changes)  # type: ignore[arg-type]


def _alloc(
    rnd: random.Random,
    i: int,
    teams: list[Team],
    flavor: Flavor,
    claims: tuple[DeviceClaim, ...],
    count: int,
    exclusive: bool,
) -> Allocation:
    borrowed = rnd.random() < 0.3
    return Allocation(
        request_id=f"run{i:03d}",
        team=rnd.choice(teams).name,
        project=rnd.choice(["p0", "p1"]),
        flavor=flavor.id,
        gpu_equivalents=count * flavor.gpu_equivalent,
        placement=claims,
        started_at=rnd.uniform(0, NOW),
        max_runtime_seconds=rnd.choice([3_600.0, 86_400.0, 400_000.0]),
        priority=rnd.randint(0, 4),
        preemptible=borrowed or rnd.random() < 0.5,
        borrowed=borrowed,
        exclusive_node=exclusive,
    )


@hs.composite
def instances(draw: hs.DrawFn) -> Instance:
    snap = build(
        seed=draw(hs.integers(0, 2**32 - 1)),
        # Hypothesis favours small sizes; the full-size end is drawn on purpose as well.
        n_nodes=draw(hs.integers(1, 50) | hs.integers(40, 50)),
        n_pending=draw(hs.integers(0, 200) | hs.integers(150, 200)),
        n_teams=draw(hs.integers(1, 4)),
        fill=draw(hs.sampled_from([0.0, 0.3, 0.6, 0.9])),
        project_quotas=draw(hs.booleans()),
    )
    return Instance(snap, plan(snap, now=NOW, policy=Policy()))


# ---------------------------------------------------------------------------------- quota


def _usage(
    snap: Snapshot, plan_: Plan
) -> tuple[dict[tuple[str, str], float], dict[tuple[str, str, str], float]]:
    """(team, flavor) and (team, project, flavor) usage after the plan."""
    ge = {f.id: f.gpu_equivalent for f in snap.flavors}
    victims = {p.victim_id for p in plan_.preemptions}
    team: defaultdict[tuple[str, str], float] = defaultdict(float)
    project: defaultdict[tuple[str, str, str], float] = defaultdict(float)
    for a in snap.allocations:
        if a.request_id not in victims:
            team[(a.team, a.flavor)] += a.gpu_equivalents
            project[(a.team, a.project, a.flavor)] += a.gpu_equivalents
    reqs = {r.id: r for r in snap.pending}
    for adm in plan_.admissions:
        r = reqs[adm.request_id]
        team[(r.team, r.flavor)] += r.gpu_count * ge[r.flavor]
        project[(r.team, r.project, r.flavor)] += r.gpu_count * ge[r.flavor]
    return team, project


@SETTINGS
@given(instances())
def test_plan_keeps_team_and_project_quota_limits(inst: Instance) -> None:
    snap, p = inst.snap, inst.plan
    before_team, before_project = _usage(snap, Plan())
    after_team, after_project = _usage(snap, p)
    team_limit = {
        (q.team, q.flavor): max(q.limit, q.guaranteed) for q in snap.quotas if q.project is None
    }
    project_limit = {(q.team, q.project, q.flavor): q.limit for q in snap.quotas if q.project}
    for key, used in after_team.items():
        if used > before_team.get(key, 0.0) + EPS:
            assert used <= team_limit.get(key, 0.0) + 1e-6, (key, used)
    for pkey, used in after_project.items():
        if used > before_project.get(pkey, 0.0) + EPS and pkey in project_limit:
            assert used <= project_limit[pkey] + 1e-6, (pkey, used)


# ------------------------------------------------------------------------------ placement


@SETTINGS
@given(instances())
def test_admissions_land_only_where_the_rules_allow(inst: Instance) -> None:
    snap, p = inst.snap, inst.plan
    model = FleetModel.of(snap)
    reqs = {r.id: r for r in snap.pending}
    flavors = {f.id: f for f in snap.flavors}
    node_devices = {(d.node_id, d.index) for d in snap.devices}
    for adm in p.admissions:
        r = reqs[adm.request_id]
        f = flavors[r.flavor]
        for nid in adm.node_ids:
            assert model.illegal(nid, r) is None, (adm.request_id, nid, model.illegal(nid, r))
        assert {c.node_id for c in adm.placement} == set(adm.node_ids)
        assert all((c.node_id, c.device_index) in node_devices for c in adm.placement)
        if f.kind == "whole":
            assert all(c.whole for c in adm.placement) and len(adm.placement) == r.gpu_count
        elif f.kind == "vgpu":
            assert len({(c.node_id, c.device_index) for c in adm.placement}) == r.gpu_count
            assert all(
                not c.whole and c.memory_mib == (r.vgpu_memory_mib or f.memory_mib)
                for c in adm.placement
            )
        else:
            assert len(adm.placement) == r.gpu_count
            assert all(c.mig_profile == (r.mig_profile or f.mig_profile) for c in adm.placement)
    # Exclusive nodes: after the plan, an exclusive holder is alone on each of its nodes.
    model.apply(p)
    for nid, holders in model.exclusive.items():
        if holders:
            assert model.tenants[nid] == holders and len(holders) == 1, (
                nid,
                holders,
                model.tenants[nid],
            )


# ----------------------------------------------------------------------------- preemption


@SETTINGS
@given(instances())
def test_preemption_only_for_strictly_higher_priority_or_a_guarantee_reclaim(
    inst: Instance,
) -> None:
    snap, p = inst.snap, inst.plan
    running = {a.request_id: a for a in snap.allocations}
    reqs = {r.id: r for r in snap.pending}
    admitted = {a.request_id: a for a in p.admissions}
    for pre in p.preemptions:
        victim = running[pre.victim_id]
        assert pre.for_request in admitted, "a preemption without the admission it was for"
        r = reqs[pre.for_request]
        assert victim.preemptible
        reclaim = victim.borrowed and not admitted[pre.for_request].borrowed
        assert victim.priority < r.priority or reclaim, (victim, r)


@SETTINGS
@given(instances())
def test_preemption_only_when_the_request_could_not_run_otherwise(inst: Instance) -> None:
    snap, p = inst.snap, inst.plan
    if not p.preemptions:
        return
    reqs = {r.id: r for r in snap.pending}
    victims_for: defaultdict[str, list[str]] = defaultdict(list)
    for pre in p.preemptions:
        victims_for[pre.for_request].append(pre.victim_id)
    reserved = {(c.node_id, c.device_index) for res in p.reservations for c in res.placement}
    for i, adm in enumerate(p.admissions):
        victims = victims_for.get(adm.request_id)
        if not victims:
            continue
        r = reqs[adm.request_id]
        before = FleetModel.of(snap)
        before.apply(p, upto=i)
        # 1. Without evicting anything the request fitted nowhere (outside reserved capacity).
        assert not before.fits_anywhere(r, blocked=reserved), (adm.request_id, victims)
        # 2. Each victim was needed: keep any one of them and the request no longer fits there.
        if len(adm.node_ids) != 1:
            continue
        for keep in victims:
            trial = FleetModel.of(snap)
            trial.apply(p, upto=i)
            for v in victims:
                if v != keep:
                    trial.release(v)
            assert not trial.fits(adm.node_ids[0], r), (adm.request_id, "needless victim", keep)


# ------------------------------------------------------------------------------- liveness


@SETTINGS
@given(instances())
def test_a_request_that_fits_free_room_within_quota_is_admitted(inst: Instance) -> None:
    """Liveness: a waiting request fitting capacity that stayed free the whole cycle (and is not
    held for a reservation), within quota even counting every admission of the cycle, is a
    request the engine wrongly left waiting: no higher-priority work took that room."""
    snap, p = inst.snap, inst.plan
    if not p.waiting:
        return
    start = FleetModel.of(snap)
    end = FleetModel.of(snap)
    end.apply(p)
    reserved = {(c.node_id, c.device_index) for res in p.reservations for c in res.placement}
    # Free throughout = free at the start and at the end (admissions only take, and what a
    # preemption frees is free only from then on); block every device that changed.
    changed = {key for key, d in end.devs.items() if d != start.devs[key]}
    blocked = reserved | changed

    ge = {f.id: f.gpu_equivalent for f in snap.flavors}
    reqs = {r.id: r for r in snap.pending}
    used: defaultdict[tuple[str, str], float] = defaultdict(float)
    pused: defaultdict[tuple[str, str, str], float] = defaultdict(float)
    cohort_of = {t.name: t.cohort for t in snap.teams}
    cused: defaultdict[tuple[str | None, str], float] = defaultdict(float)
    for a in snap.allocations:  # the most each key held at any moment: start + every admission
        used[(a.team, a.flavor)] += a.gpu_equivalents
        pused[(a.team, a.project, a.flavor)] += a.gpu_equivalents
        cused[(cohort_of.get(a.team), a.flavor)] += a.gpu_equivalents
    for adm in p.admissions:
        r = reqs[adm.request_id]
        used[(r.team, r.flavor)] += r.gpu_count * ge[r.flavor]
        pused[(r.team, r.project, r.flavor)] += r.gpu_count * ge[r.flavor]
        cused[(cohort_of.get(r.team), r.flavor)] += r.gpu_count * ge[r.flavor]
    guaranteed = {(q.team, q.flavor): q.guaranteed for q in snap.quotas if q.project is None}
    limit = {
        (q.team, q.flavor): max(q.limit, q.guaranteed) for q in snap.quotas if q.project is None
    }
    plimit = {(q.team, q.project, q.flavor): q.limit for q in snap.quotas if q.project}
    cguaranteed: defaultdict[tuple[str | None, str], float] = defaultdict(float)
    for (team, flavor), g in guaranteed.items():
        if cohort_of.get(team) is not None:
            cguaranteed[(cohort_of[team], flavor)] += g

    def within_quota(r: Request) -> bool:
        key, d = (r.team, r.flavor), r.gpu_count * ge[r.flavor]
        if key not in limit:
            return False
        pkey = (r.team, r.project, r.flavor)
        if pkey in plimit and pused[pkey] + d > plimit[pkey] + EPS:
            return False
        if used[key] + d <= guaranteed[key] + EPS:
            return True
        cohort = cohort_of.get(r.team)
        return (
            cohort is not None
            and used[key] + d <= limit[key] + EPS
            and cused[(cohort, r.flavor)] + d <= cguaranteed[(cohort, r.flavor)] + EPS
        )

    for w in p.waiting:
        r = reqs[w.request_id]
        if not within_quota(r):
            continue
        spot = next(
            (
                n.id
                for n in snap.nodes
                if not start.exclusive[n.id]
                and (r.allow_shared_node or not start.tenants[n.id])
                and end.fits(n.id, r, blocked)
            ),
            None,
        )
        assert spot is None, (
            f"{r.id} ({r.flavor} x{r.gpu_count}, priority {r.priority}) waits ({w.code}: "
            f"{w.reason}) though node {spot} had room all cycle and its quota allows it"
        )
