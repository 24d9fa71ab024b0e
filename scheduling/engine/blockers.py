"""The one thing that most keeps each waiting request from starting, in words for its owner.

`explain_waits(snapshot, plan)` returns a `Blocker` per request the plan leaves waiting. The
engine's wait codes say *that* a request waits on quota or capacity; a blocker says *which*:

- quota waits (`Waiting.code == "quota"`) are split by the quota ledger after the plan:
  `team_quota` when the team (or the project) has used what it may ever use of the flavor
  without borrowing; `borrowing_limit` when the request needs borrowed quota and may not
  borrow: the team already borrows up to its limit, or nothing is left to lend (no idle
  guarantee in its cohort, no unassigned capacity left). Their figures are in the flavor's
  own unit (GPUs, vGPU shares, MIG instances), with the team's and flavor's display names;
- capacity waits (`capacity`, `reserved`) are split by the free capacity the plan leaves on
  the nodes that could run the request (its pools, labels, GPU model, taints), counted in
  GPU-equivalents (GE) for the request's kind (whole free cards, vGPU share, free MIG slices):
  0. some healthy node has the GE its GPUs need on one node, but none of those nodes has the
     pod's CPU and memory free: `host_resources`;
  1. the healthy nodes have the GE it needs, yet no node or GPU has room for it:
     `mig_layout` when it is a MIG request and the cards' fixed MIG layouts offer too few free
     instances of its profile although the free slices would hold them, else `fragmentation`
     (for whole cards on one node: how many are free and over how many nodes);
  1a. a MIG request the healthy nodes cannot hold, where nodes whose MIG layout the cluster
     does not let us read would be candidates: `mig_layout`, naming them;
  2. the GE it needs exists only with nodes that take no work (cordoned, held back or not
     ready): `node_health`;
  3. otherwise `capacity`: the pool is full. So are waits behind another request's reservation,
     waits kept out of a pool's short-request reserve, and requests no pool can run.

Approval, budget and cluster-side blockers are not the engine's to see: `approval_blocker` and
`cluster_blocker` phrase them from what the portal records (scheduling/services/blockers.py).

Pure: the plan's admissions and preemptions are replayed onto the snapshot's free capacity and
quota usage, nothing else is read. Cost: one pass over the devices and allocations plus one
pass per distinct request shape over the nodes that could run it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Literal, get_args

from .filters import POOL_FILTERS
from .quota import EPS, QuotaLedger, quota_unit, units
from .reserve import reserve_reason
from .state import Shape, is_gang, shape_fields, shape_of
from .types import (
    MIG_SLICES,
    CardUsage,
    DeviceClaim,
    Flavor,
    Node,
    Plan,
    Request,
    Snapshot,
    Waiting,
    mig_bits,
    mig_free_by_profile,
    mig_layout_starts,
)

BlockerCode = Literal[
    "approval",
    "budget",
    "team_quota",
    "borrowing_limit",
    "capacity",
    "fragmentation",
    "mig_layout",
    "host_resources",
    "node_health",
    "retry_backoff",
    "cluster",
]
#: Every code, in the order of the docs (docs/blockers.md).
BLOCKER_CODES: tuple[BlockerCode, ...] = get_args(BlockerCode)
#: The codes `explain_waits` gives (a queued request's blockers).
ENGINE_CODES: frozenset[BlockerCode] = frozenset(
    {
        "team_quota",
        "borrowing_limit",
        "capacity",
        "fragmentation",
        "mig_layout",
        "node_health",
        "host_resources",
    }
)

DetailValue = str | int | float | list[str] | None


@dataclass(frozen=True, slots=True)
class Blocker:
    """The most binding reason a request waits: a code, one sentence, and the figures behind it."""

    code: BlockerCode
    message: str
    detail: dict[str, DetailValue] = field(default_factory=dict, hash=False, compare=True)

    def as_dict(self) -> dict[str, object]:
        return {"code": self.code, "message": self.message, "detail": dict(self.detail)}


def _ge(value: float) -> float:
    return round(value, 2)


def _fmt(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".")


# ----------------------------------------------------------------------------- quota


def quota_blocker(
    ledger: QuotaLedger,
    request: Request,
    demand: float,
    reason: str,
    flavor: Flavor | None = None,
    team_name: str | None = None,
) -> Blocker:
    """Team quota or borrowing limit, read from the ledger (usage after the plan), in the
    flavor's own unit (GPUs, vGPU shares or MIG instances; see quota.quota_unit)."""
    fl = flavor or Flavor(request.flavor, "whole")
    team, project = request.team, request.project
    who, what = team_name or team, fl.label
    key = (team, fl.id)
    limit = ledger.limit.get(key)
    detail: dict[str, DetailValue] = {"reason": reason, "demand_ge": _ge(demand)}

    def n(amount_ge: float) -> str:
        return _fmt(units(amount_ge, fl))

    def unit(amount_ge: float) -> str:
        return quota_unit(fl.kind, round(units(amount_ge, fl), 2))

    if limit is None:
        return Blocker("team_quota", f"Team {who} has no quota for {what}.", detail)
    plimit = ledger.project_limit.get((team, project, fl.id))
    pused = ledger.project_used[(team, project, fl.id)]
    if plimit is not None and pused + demand > plimit + EPS:
        detail |= {"used_ge": _ge(pused), "limit_ge": _ge(plimit), "unit": unit(plimit)}
        return Blocker(
            "team_quota",
            f"Project {project} has used its {what} limit "
            f"({n(pused)} of {n(plimit)} {unit(plimit)} in use).",
            detail,
        )
    used, guaranteed = ledger.used[key], ledger.guaranteed[key]
    detail |= {
        "used_ge": _ge(used),
        "guaranteed_ge": _ge(guaranteed),
        "limit_ge": _ge(limit),
        "unit": unit(limit),
    }
    if used + demand > limit + EPS:
        if limit > guaranteed + EPS:
            return Blocker(
                "borrowing_limit",
                f"Team {who} is at its {what} limit: {n(used)} of {n(limit)} {unit(limit)} in "
                f"use, {n(guaranteed)} guaranteed and the rest borrowed; it starts as the "
                "team's own work ends.",
                detail,
            )
        return Blocker(
            "team_quota",
            f"Team {who} uses all {n(limit)} {unit(limit)} of its {what} quota; it starts as "
            "the team's own work ends.",
            detail,
        )
    if used + demand > guaranteed + EPS:
        cohort = ledger.cohort_of.get(team)
        idle = ledger.cohort_idle(team, fl.id) if cohort is not None else 0.0
        left = ledger.unassigned_left(fl.id)
        total = ledger.lending.unassigned.get(fl.id, 0.0)
        detail |= {
            "cohort": cohort,
            "cohort_idle_ge": _ge(idle),
            "unassigned_ge": _ge(total),
            "unassigned_left_ge": _ge(left),
        }
        sources = []
        if cohort is not None:
            sources.append(f"{n(idle)} idle in other teams' guarantees")
        if total <= EPS:
            sources.append(f"every {what} card is guaranteed to a team or not lent by its tier")
        else:
            sources.append(f"{n(left)} of {n(total)} unassigned {unit(total)} left to lend")
        return Blocker(
            "borrowing_limit",
            f"Team {who} uses {n(used)} {unit(used)} of {what}, {n(guaranteed)} guaranteed, "
            f"and too little is free to borrow more: {' and '.join(sources)}; "
            f"{n(demand)} needed.",
            detail,
        )
    # Quota the plan's preemptions gave back after the request was decided.
    return Blocker("team_quota", f"Team {who} was at its {what} quota this cycle.", detail)


# ----------------------------------------------------------------------------- capacity


@dataclass(slots=True)
class _Device:
    """Free capacity of one GPU after the plan (mutable copy of a snapshot GpuDevice)."""

    memory_total_mib: int
    mig_capable: bool
    mig_layout: tuple[tuple[str, int], ...]
    used: CardUsage

    def take(self, claim: DeviceClaim, sign: int) -> None:
        """Apply (sign 1) or give back (sign -1) one claim."""
        self.used = self.used + claim.usage if sign > 0 else self.used - claim.usage

    @property
    def fully_free(self) -> bool:
        return self.used.idle

    def free_ge(self, kind: str) -> float:
        """Free GE for a request of flavor kind `kind`."""
        if self.used.whole:
            return 0.0
        if kind == "mig":
            if not self.mig_capable:
                return 0.0
            return (MIG_SLICES - self.used.mig_slices) / MIG_SLICES
        if kind == "vgpu":
            memory_free = max(0, self.memory_total_mib - self.used.memory_mib)
            memory = memory_free / max(1, self.memory_total_mib)
            return max(0.0, min(memory, (100 - self.used.cores_percent) / 100))
        return 1.0 if self.fully_free else 0.0

    def free_instances(self, profile: str, *, honour_layout: bool) -> int:
        """Free instances of a MIG profile: as the card's fixed layout offers them, or as the
        free slices alone would hold them."""
        if not self.mig_capable or self.used.whole:
            return 0
        if not self.mig_layout or not honour_layout:
            return mig_free_by_profile(self.used.mig_mask).get(profile, 0)
        starts = mig_layout_starts(self.mig_layout).get(profile, ())
        return sum(1 for s in starts if not self.used.mig_mask & mig_bits(profile, s))


class _Fleet:
    """The snapshot's nodes and devices with the plan's admissions and preemptions applied."""

    def __init__(self, snapshot: Snapshot, plan: Plan) -> None:
        self.snapshot = snapshot
        self.devices: dict[str, list[_Device]] = defaultdict(list)
        self.by_key: dict[tuple[str, int], _Device] = {}
        self._free_ge: dict[tuple[str, str], float] = {}
        self._nodes_for: dict[Shape, tuple[Node, ...]] = {}
        for d in sorted(snapshot.devices, key=lambda d: (d.node_id, d.index)):
            device = _Device(d.memory_total_mib, d.mig_capable, d.mig_layout, d.usage)
            self.devices[d.node_id].append(device)
            self.by_key[(d.node_id, d.index)] = device
        victims = {p.victim_id for p in plan.preemptions}
        pending = {r.id: r for r in snapshot.pending}
        self.exclusive: set[str] = set()
        # Free host CPU and memory of the nodes that report them.
        self.cpu_free = {n.id: n.cpu_millicores for n in snapshot.nodes if n.cpu_millicores}
        self.mem_free = {n.id: n.memory_mib for n in snapshot.nodes if n.memory_mib}
        for alloc in snapshot.allocations:
            if alloc.request_id in victims:
                self._take(alloc.placement, -1)
                continue
            if alloc.exclusive_node:
                self.exclusive.update(c.node_id for c in alloc.placement)
            self._take_host(alloc.placement, alloc.cpu_millicores, alloc.memory_mib)
        for admission in plan.admissions:
            self._take(admission.placement, 1)
            request = pending.get(admission.request_id)
            if request is not None and not request.allow_shared_node:
                self.exclusive.update(admission.node_ids)
            if request is not None:
                self._take_host(admission.placement, request.cpu_millicores, request.memory_mib)

    def _take_host(self, placement: tuple[DeviceClaim, ...], cpu: int, mem: int) -> None:
        for node_id in dict.fromkeys(c.node_id for c in placement):
            if node_id in self.cpu_free:
                self.cpu_free[node_id] -= cpu
            if node_id in self.mem_free:
                self.mem_free[node_id] -= mem

    def host_fits(self, node: Node, cpu: int, mem: int) -> bool:
        return self.cpu_free.get(node.id, cpu) >= cpu and self.mem_free.get(node.id, mem) >= mem

    def _take(self, placement: tuple[DeviceClaim, ...], sign: int) -> None:
        for claim in placement:
            device = self.by_key.get((claim.node_id, claim.device_index))
            if device is not None:
                device.take(claim, sign)

    def nodes_for(self, shape: Shape) -> tuple[Node, ...]:
        """Nodes that could run `shape` once healthy: pool, labels, GPU model and taints fit."""
        found = self._nodes_for.get(shape)
        if found is None:
            found = self._nodes_for[shape] = self._find_nodes(shape)
        return found

    def _find_nodes(self, shape: Shape) -> tuple[Node, ...]:
        pools = {
            p.name: p
            for p in self.snapshot.pools
            if all(check(p, shape) is None for check in POOL_FILTERS.values())
        }
        out = []
        for node in self.snapshot.nodes:
            pool = pools.get(node.pool)
            if pool is None:
                continue
            labels = dict(node.labels)
            if any(labels.get(k) != v for k, v in pool.node_selector + shape.node_selector):
                continue
            if shape.models is not None and node.gpu_model not in shape.models:
                continue
            pool_taints = {t.key for t in pool.taints}
            if any(
                t.effect in ("NoSchedule", "NoExecute")
                and t.key not in pool_taints
                and t.key not in shape.tolerations
                for t in node.taints
            ):
                continue
            out.append(node)
        return tuple(out)

    def free_ge(self, node: Node, kind: str) -> float:
        # The fleet no longer changes once built, and each shape asks about the same nodes.
        key = (node.id, kind)
        free = self._free_ge.get(key)
        if free is None:
            free = self._free_ge[key] = (
                0.0
                if node.id in self.exclusive
                else sum(d.free_ge(kind) for d in self.devices.get(node.id, ()))
            )
        return free


def capacity_blocker(fleet: _Fleet, request: Request, flavor: Flavor, wait: Waiting) -> Blocker:
    """Capacity, fragmentation, MIG layout or node health (see the module docstring)."""
    shape = shape_of(request, flavor)
    demand = request.gpu_count * flavor.gpu_equivalent
    nodes = fleet.nodes_for(shape)
    pools = sorted({n.pool for n in nodes})
    labels = {p.name: p.label for p in fleet.snapshot.pools}
    where = ", ".join(labels.get(p, p) for p in pools) if pools else "none"
    detail: dict[str, DetailValue] = {
        "reason": wait.reason,
        "pools": pools,
        "demand_ge": _ge(demand),
    }
    if not nodes:
        return Blocker("capacity", "No pool has nodes that can run it.", detail)
    if wait.code == "reservation":
        return Blocker(
            "capacity",
            f"The free capacity of pool {where} that fits it is held for a request ahead of it.",
            detail,
        )
    for pool in fleet.snapshot.pools:
        reserved = pool.name in pools and pool.short_reserve_fraction > 0
        if reserved and reserve_reason(pool) in wait.reason:
            return Blocker(
                "capacity",
                f"Pool {pool.label} has no room for long work outside the share it keeps "
                "for short requests.",
                detail,
            )
    healthy = [n for n in nodes if n.schedulable]
    unhealthy = [n for n in nodes if not n.schedulable]
    host = host_blocker(fleet, shape, flavor, healthy, detail)
    if host is not None:
        return host
    healthy_free = sum(fleet.free_ge(n, shape.kind) for n in healthy)
    unhealthy_free = sum(fleet.free_ge(n, shape.kind) for n in unhealthy)
    if healthy_free + EPS >= demand:
        # The free figure is given where it is the point; a full pool's blocker leaves it out,
        # so that it stays the same (and is not written again) while the pool's load moves.
        detail |= {"free_ge": _ge(healthy_free)}
        if shape.kind == "mig" and shape.mig_profile:
            cards = [d for n in healthy if n.id not in fleet.exclusive for d in fleet.devices[n.id]]
            offered = sum(d.free_instances(shape.mig_profile, honour_layout=True) for d in cards)
            would_hold = sum(
                d.free_instances(shape.mig_profile, honour_layout=False) for d in cards
            )
            laid_out = [d for d in cards if d.mig_layout]
            never = bool(laid_out) and all(
                shape.mig_profile not in dict(d.mig_layout) for d in laid_out
            )
            if offered < shape.gpu_count and (would_hold >= shape.gpu_count or never):
                detail |= {"profile": shape.mig_profile, "free_instances": offered}
                return Blocker(
                    "mig_layout",
                    f"The MIG layout of pool {where}'s cards offers {offered} free "
                    f"{shape.mig_profile} instance{'s' if offered != 1 else ''}, "
                    f"{shape.gpu_count} needed.",
                    detail,
                )
        spread = [n for n in healthy if fleet.free_ge(n, shape.kind) > EPS]
        if shape.kind == "whole" and not is_gang(shape, 0) and len(spread) > 1:
            gpus = f"{flavor.gpu_model} GPUs" if flavor.gpu_model else "GPUs"
            detail |= {"nodes_with_free": len(spread)}
            return Blocker(
                "fragmentation",
                f"Waiting for {shape.gpu_count} {gpus} on one node; {_fmt(healthy_free)} are "
                f"free in pool {where} but spread over {len(spread)} nodes.",
                detail,
            )
        return Blocker(
            "fragmentation",
            f"Pool {where} has {_fmt(healthy_free)} GPU-eq free, enough for the "
            f"{_fmt(demand)} it needs, but no single node or GPU has room for it.",
            detail,
        )
    unread = [n for n in unhealthy if n.mig_layout_problem] if shape.kind == "mig" else []
    if unread:
        names = sorted(n.id for n in unread)
        detail |= {"nodes": names, "layout_problem": unread[0].mig_layout_problem}
        shown = ", ".join(names[:3]) + (" ..." if len(names) > 3 else "")
        return Blocker(
            "mig_layout",
            f"The MIG layout of node {shown} cannot be read from the cluster, so it is not "
            f"offered for MIG work: {unread[0].mig_layout_problem}",
            detail,
        )
    if unhealthy and healthy_free + unhealthy_free + EPS >= demand:
        names = sorted(n.id for n in unhealthy if fleet.free_ge(n, shape.kind) > 0)
        detail |= {"nodes": names, "unavailable_free_ge": _ge(unhealthy_free)}
        shown = ", ".join(names[:3]) + (" ..." if len(names) > 3 else "")
        return Blocker(
            "node_health",
            f"The capacity it needs is on nodes that take no work now (cordoned, held back or "
            f"not ready): {shown}.",
            detail,
        )
    return Blocker(
        "capacity",
        f"Pool {where} has too little free for the {_fmt(demand)} GPU-eq it needs; "
        "it starts as running work ends.",
        detail,
    )


def host_blocker(
    fleet: _Fleet, shape: Shape, flavor: Flavor, healthy: list[Node], detail: dict[str, DetailValue]
) -> Blocker | None:
    """`host_resources` when healthy nodes have room for the request's GPUs (in GE, on one node;
    a gang's per-node part) but none of them has the pod's CPU and memory free."""
    cpu, mem = shape.cpu_millicores, shape.host_memory_mib
    if not cpu and not mem:
        return None
    roomy = []
    for n in healthy:
        cards = len(fleet.devices.get(n.id, ()))
        count = min(shape.gpu_count, cards) if is_gang(shape, 0) else shape.gpu_count
        if fleet.free_ge(n, shape.kind) + EPS >= count * flavor.gpu_equivalent:
            if fleet.host_fits(n, cpu, mem):
                return None
            roomy.append(n)
    if not roomy:
        return None
    most_cpu = max(fleet.cpu_free.get(n.id, 0) for n in roomy)
    most_mem = max(fleet.mem_free.get(n.id, 0) for n in roomy)
    detail |= {
        "cpu_millicores": cpu,
        "memory_mib": mem,
        "most_cpu_free_millicores": max(0, most_cpu),
        "most_memory_free_mib": max(0, most_mem),
    }
    wanted = " and ".join(
        ([f"{cpu / 1000:g} CPU"] if cpu else []) + ([f"{mem / 1024:g} GiB"] if mem else [])
    )
    return Blocker(
        "host_resources",
        f"Waiting for a node with {wanted} free beside its GPUs; the nodes with room for the "
        f"GPUs have at most {max(0, most_cpu) / 1000:g} CPU and "
        f"{max(0, most_mem) / 1024:g} GiB free.",
        detail,
    )


# ----------------------------------------------------------------------------- entry point


def explain_waits(snapshot: Snapshot, plan: Plan) -> dict[str, Blocker]:
    """The blocker of each request `plan` leaves waiting, by request id.

    1. Replay the plan onto the snapshot: victims give back their capacity and quota,
       admissions take theirs.
    2. Classify each wait: quota waits by the ledger, capacity waits by the free capacity of the
       nodes that could run it; requests of one shape share one capacity answer.
    """
    # 1. Replay.
    fleet = _Fleet(snapshot, plan)
    ledger = QuotaLedger.of(snapshot)
    victims = {p.victim_id for p in plan.preemptions}
    for alloc in snapshot.allocations:
        if alloc.request_id not in victims:
            ledger.charge(alloc.team, alloc.project, alloc.flavor, alloc.gpu_equivalents)
    flavors = {f.id: f for f in snapshot.flavors}
    team_names = {t.name: t.display_name or t.name for t in snapshot.teams}
    pending = {r.id: r for r in snapshot.pending}
    for admission in plan.admissions:
        request = pending.get(admission.request_id)
        if request is not None and request.flavor in flavors:
            demand = request.gpu_count * flavors[request.flavor].gpu_equivalent
            ledger.charge(request.team, request.project, request.flavor, demand)
    # 2. Classify.
    out: dict[str, Blocker] = {}
    by_shape: dict[tuple[object, ...], Blocker] = {}
    for wait in plan.waiting:
        request = pending.get(wait.request_id)
        if request is None:
            continue
        flavor = flavors.get(request.flavor)
        if flavor is None or wait.code == "invalid":
            out[wait.request_id] = Blocker(
                "capacity", f"No pool can run it: {wait.reason}.", {"reason": wait.reason}
            )
            continue
        if wait.code == "quota":
            demand = request.gpu_count * flavor.gpu_equivalent
            out[wait.request_id] = quota_blocker(
                ledger, request, demand, wait.reason, flavor, team_names.get(request.team)
            )
            continue
        key = (*shape_fields(request), wait.code, wait.reason)  # one answer per shape and wait
        hit = by_shape.get(key)
        if hit is None:
            hit = by_shape[key] = capacity_blocker(fleet, request, flavor, wait)
        out[wait.request_id] = hit
    return out
