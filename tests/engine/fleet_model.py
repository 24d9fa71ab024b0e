"""An independent model of a fleet for checking plans: device state, legality and fit.

Written apart from the engine (no engine helper is used) so that a property test compares the
engine's plan with a second, plain reading of the rules in docs/engine.md:

* a node is legal for a request when it is schedulable, its pool serves the flavor's kind and
  the workload kind, it carries the pool's and the request's selector labels, its GPU model is
  the one the flavor or the request pins, and every NoSchedule/NoExecute taint that is not the
  pool's own is tolerated;
* a request fits a node when the node is not held exclusively, an exclusive request finds no
  other work on it, and the node has N fully free cards (whole), N distinct cards with the share's
  memory and cores free (vGPU), or room for N instances of the profile (MIG).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from scheduling.engine.types import (
    MIG_PROFILES,
    DeviceClaim,
    Flavor,
    Plan,
    Request,
    Snapshot,
    mig_bits,
)


@dataclass(slots=True)
class Dev:
    total: int
    mem_free: int
    cores_free: int
    mig_mask: int
    whole: bool
    mig_capable: bool

    def fully_free(self) -> bool:
        return (
            not self.whole
            and self.mig_mask == 0
            and self.mem_free == self.total
            and self.cores_free == 100
        )


@dataclass
class FleetModel:
    snap: Snapshot
    devs: dict[tuple[str, int], Dev] = field(default_factory=dict)
    tenants: defaultdict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    exclusive: defaultdict[str, set[str]] = field(default_factory=lambda: defaultdict(set))

    @classmethod
    def of(cls, snap: Snapshot) -> FleetModel:
        m = cls(snap)
        for d in snap.devices:
            m.devs[(d.node_id, d.index)] = Dev(
                d.memory_total_mib,
                d.memory_free_mib,
                d.cores_free_percent,
                d.mig_used_mask,
                d.whole_allocated,
                d.mig_capable,
            )
        for a in snap.allocations:
            for n in {c.node_id for c in a.placement}:
                m.tenants[n].add(a.request_id)
                if a.exclusive_node:
                    m.exclusive[n].add(a.request_id)
        return m

    # ------------------------------------------------------------------ state changes

    def _claims(self, claims: Iterable[DeviceClaim], sign: int) -> None:
        for c in claims:
            d = self.devs[(c.node_id, c.device_index)]
            if c.mig_profile is not None and c.mig_start is not None:
                bits = mig_bits(c.mig_profile, c.mig_start)
                d.mig_mask = d.mig_mask | bits if sign > 0 else d.mig_mask & ~bits
            elif c.whole:
                d.whole = sign > 0
            else:
                d.mem_free -= sign * c.memory_mib
                d.cores_free -= sign * c.cores_percent

    def release(self, request_id: str) -> None:
        a = next(a for a in self.snap.allocations if a.request_id == request_id)
        self._claims(a.placement, -1)
        for n in {c.node_id for c in a.placement}:
            self.tenants[n].discard(request_id)
            self.exclusive[n].discard(request_id)

    def take(self, request_id: str, claims: Iterable[DeviceClaim], exclusive: bool) -> None:
        claims = tuple(claims)
        self._claims(claims, +1)
        for n in {c.node_id for c in claims}:
            self.tenants[n].add(request_id)
            if exclusive:
                self.exclusive[n].add(request_id)

    def apply(self, plan: Plan, upto: int | None = None) -> None:
        """Apply the plan's admissions (the first `upto`) with the preemptions made for them."""
        reqs = {r.id: r for r in self.snap.pending}
        victims_for: defaultdict[str, list[str]] = defaultdict(list)
        for p in plan.preemptions:
            victims_for[p.for_request].append(p.victim_id)
        for adm in plan.admissions[:upto]:
            for v in victims_for[adm.request_id]:
                self.release(v)
            self.take(adm.request_id, adm.placement, not reqs[adm.request_id].allow_shared_node)

    # ------------------------------------------------------------------ rules

    def flavor(self, r: Request) -> Flavor:
        return next(f for f in self.snap.flavors if f.id == r.flavor)

    def illegal(self, node_id: str, r: Request) -> str | None:
        """Why `node_id` may never host `r` (None if it may)."""
        node = next(n for n in self.snap.nodes if n.id == node_id)
        pool = next((p for p in self.snap.pools if p.name == node.pool), None)
        f = self.flavor(r)
        if pool is None:
            return "node in no pool"
        if not node.schedulable:
            return "node cordoned"
        if f.kind != "whole" and f.kind != pool.sharing:
            return f"pool {pool.name} is {pool.sharing}, flavor {f.kind}"
        if r.kind not in pool.allowed_kinds:
            return f"pool {pool.name} does not accept {r.kind}"
        labels = dict(node.labels)
        for k, v in pool.node_selector + r.node_selector:
            if labels.get(k) != v:
                return f"label {k}={v} missing"
        for model in (f.gpu_model, r.pinned_model):
            if model is not None and node.gpu_model != model:
                return f"model {node.gpu_model}, pinned {model}"
        pool_keys = {t.key for t in pool.taints}
        for t in node.taints:
            untolerated = t.key not in pool_keys and t.key not in r.tolerations
            if t.effect != "PreferNoSchedule" and untolerated:
                return f"taint {t.key} not tolerated"
        return None

    def node_devices(self, node_id: str) -> list[tuple[int, Dev]]:
        return sorted((i, d) for (n, i), d in self.devs.items() if n == node_id)

    def fits(self, node_id: str, r: Request, blocked: Collection[tuple[str, int]] = ()) -> bool:
        """`r` (or, for a whole-card gang, one node's full share of it) fits `node_id` now."""
        if self.illegal(node_id, r) is not None or self.exclusive[node_id]:
            return False
        if not r.allow_shared_node and self.tenants[node_id]:
            return False
        f = self.flavor(r)
        devs = [(i, d) for i, d in self.node_devices(node_id) if (node_id, i) not in blocked]
        n = r.gpu_count
        if f.kind == "whole":
            if n > len(self.node_devices(node_id)):
                return False  # a gang: not modelled here
            return sum(1 for _, d in devs if d.fully_free()) >= n
        if f.kind == "vgpu":
            mem = r.vgpu_memory_mib or f.memory_mib
            cores = r.vgpu_cores_percent or f.cores_percent
            ok = [
                d
                for _, d in devs
                if not d.whole and not d.mig_capable and d.mem_free >= mem and d.cores_free >= cores
            ]
            return len(ok) >= n
        profile = r.mig_profile or f.mig_profile
        if profile is None or profile not in MIG_PROFILES:
            return False
        return sum(mig_instances(d.mig_mask, profile) for _, d in devs if d.mig_capable) >= n

    def fits_anywhere(self, r: Request, blocked: Collection[tuple[str, int]] = ()) -> bool:
        return any(self.fits(n.id, r, blocked) for n in self.snap.nodes)


def mig_instances(mask: int, profile: str) -> int:
    """Instances of `profile` that fit a used-slice mask, placed at the first legal starts."""
    prof = MIG_PROFILES[profile]
    count = 0
    for s in prof.starts:
        bits = ((1 << prof.slices) - 1) << s
        if not mask & bits:
            mask |= bits
            count += 1
    return count
