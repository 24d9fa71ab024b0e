"""Value types of the scheduling engine: what goes in (Snapshot, Policy) and what comes out (Plan).

Every type is a frozen, slotted dataclass so a snapshot can be shared, hashed where useful and
never mutated behind the engine's back.  Collections are tuples (ordered, hashable) instead of
lists or sets so that iteration order is part of the value and plans are deterministic.

Units: memory in MiB, cores in percent of one GPU (0-100), host CPU in millicores, time in epoch
seconds, capacity and quota in GPU-equivalents ("GE": one whole card = 1.0, a MIG 1g slice =
1/7, a vGPU share = max(memory share, core share)).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import IntEnum
from typing import Any, Literal

from .mig import MIG_GPUS

SharingMode = Literal["exclusive", "vgpu", "mig"]
Scoring = Literal["binpack", "spread"]
FlavorKind = Literal["whole", "vgpu", "mig"]


class Priority(IntEnum):
    """Named priority classes; larger runs first.  Requests carry the plain integer."""

    BATCH = 0
    LOW = 1
    NORMAL = 2
    HIGH = 3
    CRITICAL = 4


@dataclass(frozen=True, slots=True)
class MigProfile:
    """A MIG instance shape: how many of the 7 compute slices it takes and where it may start."""

    name: str
    slices: int
    starts: tuple[int, ...]

    @property
    def gpu_equivalent(self) -> float:
        return self.slices / MIG_SLICES


MIG_SLICES = 7


def _engine_profiles() -> dict[str, MigProfile]:
    """Every profile of the MIG table (mig.py) on the engine's compute-slice axis: a placement
    occupies bits [start, start + compute slices) of a 7-bit mask, at the starts NVIDIA lists
    (the union over the cards that share the name).  The table keeps the exact memory-slice
    geometry; layouts read from the cluster (`mig_layout_starts`) pin instances to it."""
    starts: dict[str, set[int]] = {}
    slices: dict[str, int] = {}
    for gpu in MIG_GPUS.values():
        for shape in gpu.profiles:
            starts.setdefault(shape.name, set()).update(shape.starts)
            slices[shape.name] = shape.compute_slices
    return {
        name: MigProfile(name, slices[name], tuple(sorted(starts[name])))
        for name in sorted(slices, key=lambda n: (slices[n], n))
    }


#: Profile name → its engine shape, from the one MIG table (scheduling/engine/mig.py).
MIG_PROFILES: dict[str, MigProfile] = _engine_profiles()


def mig_bits(profile: str, start: int) -> int:
    """Bitmask of the compute slices a `profile` instance starting at `start` occupies."""
    return ((1 << MIG_PROFILES[profile].slices) - 1) << start


def mig_free_by_profile(used_mask: int) -> dict[str, int]:
    """How many more instances of each profile fit on a GPU whose occupied slices are `used_mask`.

    Counts are per profile in isolation (placing one may reduce the others), which is what the
    NVIDIA device plugin reports as allocatable MIG resources.
    """
    out: dict[str, int] = {}
    for name, prof in MIG_PROFILES.items():
        mask = used_mask
        n = 0
        for s in prof.starts:
            bits = mig_bits(name, s)
            if s + prof.slices <= MIG_SLICES and not mask & bits:
                mask |= bits
                n += 1
        out[name] = n
    return out


def mig_layout_starts(layout: tuple[tuple[str, int], ...]) -> dict[str, tuple[int, ...]]:
    """Where the instances of a fixed MIG layout sit: profile → the start slices of its instances.

    `layout` counts instances per profile, as the device plugin reports them (`(("1g.10gb", 4),
    ("3g.40gb", 1))`). Larger profiles are laid out first, each at its lowest legal start whose
    slices are still free; instances that do not fit the 7 slices, and unknown profiles, are left
    out (the card cannot hold them).
    """
    used = 0
    starts: dict[str, list[int]] = {}
    known = sorted(
        ((MIG_PROFILES[p], n) for p, n in layout if p in MIG_PROFILES and n > 0),
        key=lambda item: (-item[0].slices, item[0].name),
    )
    for prof, count in known:
        for s in prof.starts:
            if len(starts.get(prof.name, ())) >= count:
                break
            bits = mig_bits(prof.name, s)
            if s + prof.slices <= MIG_SLICES and not used & bits:
                used |= bits
                starts.setdefault(prof.name, []).append(s)
    return {p: tuple(s) for p, s in starts.items()}


def vgpu_equivalent(memory_mib: int, cores_percent: int, device_memory_mib: int) -> float:
    """GE weight of a vGPU share: the larger of its memory share and its core share."""
    return max(memory_mib / device_memory_mib, cores_percent / 100.0)


@dataclass(frozen=True, slots=True)
class CardUsage:
    """What work holds on one GPU: the whole card, MIG compute slices, or vGPU memory and cores.

    The one rule of card usage (docs/engine.md). A claim holds one kind (`DeviceClaim.usage`);
    usages add up and give back without clamping; a card's free figures are clamped (`free_on`).
    """

    memory_mib: int = 0
    cores_percent: int = 0
    mig_mask: int = 0
    whole: bool = False

    def __add__(self, o: CardUsage) -> CardUsage:
        m, c = self.memory_mib + o.memory_mib, self.cores_percent + o.cores_percent
        return CardUsage(m, c, self.mig_mask | o.mig_mask, self.whole or o.whole)

    def __sub__(self, o: CardUsage) -> CardUsage:
        m, c = self.memory_mib - o.memory_mib, self.cores_percent - o.cores_percent
        return CardUsage(m, c, self.mig_mask & ~o.mig_mask, self.whole and not o.whole)

    @property
    def idle(self) -> bool:
        held = self.whole or self.mig_mask
        return not held and self.memory_mib <= 0 and self.cores_percent <= 0

    @property
    def mig_slices(self) -> int:
        return bin(self.mig_mask).count("1")

    def free_on(self, memory_total_mib: int) -> tuple[int, int]:
        """(free memory MiB, free cores percent) of a card of `memory_total_mib` holding this."""
        memory = min(memory_total_mib, max(0, memory_total_mib - self.memory_mib))
        return memory, min(100, max(0, 100 - self.cores_percent))

    def fits(self, extra: CardUsage, memory_total_mib: int) -> bool:
        """`extra` fits beside this on a card of `memory_total_mib`: a whole card on an idle
        card, MIG slices where none is held, a vGPU share within memory and 100 % of cores."""
        if self.whole or extra.whole:
            return not self.whole and self.idle
        return (
            not self.mig_mask & extra.mig_mask
            and self.memory_mib + extra.memory_mib <= memory_total_mib
            and self.cores_percent + extra.cores_percent <= 100
        )


def stored_claim_usage(claim: Mapping[str, Any]) -> CardUsage:
    """`DeviceClaim.usage` of a claim as the portal stores it (a JSON object of its fields)."""
    memory, cores = int(claim.get("memory_mib") or 0), int(claim.get("cores_percent") or 0)
    profile, start = claim.get("mig_profile") or None, claim.get("mig_start")
    return DeviceClaim("", 0, bool(claim.get("whole")), memory, cores, profile, start).usage


@dataclass(frozen=True, slots=True)
class Taint:
    """A node taint; effects NoSchedule and NoExecute must be tolerated, PreferNoSchedule not."""

    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True, slots=True)
class Pool:
    """A group of nodes sharing one sharing mode and scoring strategy.

    `taints` are tolerated automatically by every workload admitted to the pool (the portal adds
    the tolerations to the pod); `node_selector` labels are required on every node of the pool.
    `tier` ranks cost/quality (0 = cheapest); the engine prefers not to spend a higher tier when
    an equally good placement exists in a lower one.  `short_reserve_fraction` of the pool's
    capacity is kept for requests with `max_runtime_seconds <= short_max_runtime_seconds`
    (see reserve.py); 0 turns the reserve off.  `lends_unassigned` (from the pool's tier) lets
    teams borrow the pool's cards that no team is guaranteed (quota.py).  `label`: its name.
    """

    name: str
    tier: int = 0
    sharing: SharingMode = "exclusive"
    scoring: Scoring = "binpack"
    allowed_kinds: tuple[str, ...] = ("training", "inference", "notebook", "batch")
    node_selector: tuple[tuple[str, str], ...] = ()
    taints: tuple[Taint, ...] = ()
    short_reserve_fraction: float = 0.0
    short_max_runtime_seconds: float = 7200.0
    lends_unassigned: bool = True
    display_name: str = ""

    @property
    def label(self) -> str:  # the name people know it by (its id when it has none)
        return self.display_name or self.name


@dataclass(frozen=True, slots=True)
class Node:
    """A node of a pool.

    `cpu_millicores` and `memory_mib` are what the node offers the portal's work: its
    allocatable CPU and memory minus what pods the portal did not create request.  The engine
    subtracts what the snapshot's allocations hold (`Allocation.cpu_millicores`) itself.  None
    means not known, and then the resource does not limit placement on the node.
    `mig_layout_problem` says why the node's MIG layout could not be read from the cluster; such
    a node is not schedulable, and a MIG request it alone could serve waits on `mig_layout`.
    """

    id: str
    pool: str
    gpu_model: str
    labels: tuple[tuple[str, str], ...] = ()
    taints: tuple[Taint, ...] = ()
    schedulable: bool = True
    cpu_millicores: int | None = None
    memory_mib: int | None = None
    mig_layout_problem: str = ""


@dataclass(frozen=True, slots=True)
class GpuDevice:
    """Free capacity of one GPU as last observed.

    `mig_used_mask` has bit i set when compute slice i of a MIG-mode GPU is in use; use
    `mig_free_by_profile` to turn it into per-profile free counts.  `whole_allocated` marks a card
    held exclusively by a whole-GPU allocation.  `mig_layout` is the card's fixed partition, as
    instances per profile (`(("1g.10gb", 7),)`): a MIG instance may only go where the layout has
    one of its profile (see `mig_layout_starts`).  Empty means any legal placement (a card the
    engine may partition as it likes).  `vgpu_share_limit` is how many vGPU shares the card may
    hold at once (HAMi's registered split count for it); 0 means no limit beyond memory and cores.
    """

    node_id: str
    index: int
    memory_total_mib: int
    memory_free_mib: int
    cores_free_percent: int = 100
    mig_capable: bool = False
    mig_used_mask: int = 0
    whole_allocated: bool = False
    mig_layout: tuple[tuple[str, int], ...] = ()
    vgpu_share_limit: int = 0

    @property
    def usage(self) -> CardUsage:
        """What holds the card, as its free figures say."""
        memory = self.memory_total_mib - self.memory_free_mib
        return CardUsage(
            memory, 100 - self.cores_free_percent, self.mig_used_mask, self.whole_allocated
        )

    def holding(self, usage: CardUsage) -> GpuDevice:
        """This card with `usage` held on it (the free figures clamped to its capacity)."""
        memory, cores = usage.free_on(self.memory_total_mib)
        return replace(
            self,
            memory_free_mib=memory,
            cores_free_percent=cores,
            mig_used_mask=usage.mig_mask,
            whole_allocated=usage.whole,
        )

    @property
    def mig_free(self) -> dict[str, int]:
        if not self.mig_capable:
            return {}
        if not self.mig_layout:
            return mig_free_by_profile(self.mig_used_mask)
        return {
            p: sum(1 for s in starts if not self.mig_used_mask & mig_bits(p, s))
            for p, starts in mig_layout_starts(self.mig_layout).items()
        }


@dataclass(frozen=True, slots=True)
class DeviceClaim:
    """What one allocation holds on one GPU: the whole card, a vGPU share or a MIG instance."""

    node_id: str
    device_index: int
    whole: bool = True
    memory_mib: int = 0
    cores_percent: int = 0
    mig_profile: str | None = None
    mig_start: int | None = None

    @property
    def usage(self) -> CardUsage:
        """A MIG instance (a known profile and a start) holds its slices, else a whole card the
        card, else a vGPU share its memory and cores."""
        if self.mig_profile in MIG_PROFILES and self.mig_start is not None:
            return CardUsage(mig_mask=mig_bits(str(self.mig_profile), self.mig_start))
        return (
            CardUsage(whole=True) if self.whole else CardUsage(self.memory_mib, self.cores_percent)
        )


@dataclass(frozen=True, slots=True)
class Allocation:
    """Running work. `request_id` identifies it in preemptions.

    `cpu_millicores` and `memory_mib` are the host resources it holds on each of its nodes
    (one pod per node: a gang's ranks each hold that much).
    """

    request_id: str
    team: str
    flavor: str
    gpu_equivalents: float
    placement: tuple[DeviceClaim, ...]
    started_at: float
    max_runtime_seconds: float
    project: str = ""
    priority: int = Priority.NORMAL
    preemptible: bool = False
    borrowed: bool = False
    exclusive_node: bool = False
    cpu_millicores: int = 0
    memory_mib: int = 0
    owner: str = ""

    @property
    def expected_end(self) -> float:
        return self.started_at + self.max_runtime_seconds


@dataclass(frozen=True, slots=True)
class Request:
    """A pending GPU request.

    vGPU size and MIG profile default to the flavor's; the request fields override them when
    non-zero / set.  A vGPU request of gpu_count N takes N shares, each on a different GPU of
    one node (HAMi `nvidia.com/gpu: N`); a MIG request of gpu_count N takes N instances of the
    profile on one node, on the same or different GPUs.  Both are charged N x the flavor's GE.
    A whole-GPU request has all its cards on one node, unless it is `distributed`: then, when
    it asks for more cards than a node of its pool has, it is a gang over several nodes of one
    pool (one rank per node).  `cpu_millicores` and `memory_mib` are the host resources of one
    pod, i.e. what it needs on each node it runs on.

    `owner` is the member of the team who asked (fair share inside a team); `queued_at` is when
    it last entered the queue (None: `submitted_at`), from which its wait counts for priority
    aging and the reservation wait; `reserved_start_at` is the start of the reservation the
    previous cycle held for it (None: none), which the next cycle keeps (backfill.py).
    """

    id: str
    team: str
    flavor: str
    submitted_at: float
    project: str = ""
    gpu_count: int = 1
    kind: str = "training"
    priority: int = Priority.NORMAL
    is_preemptible: bool = False
    allow_shared_node: bool = True
    pinned_model: str | None = None
    vgpu_memory_mib: int = 0
    vgpu_cores_percent: int = 0
    mig_profile: str | None = None
    max_runtime_seconds: float = 86_400.0
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[str, ...] = ()
    # The pools it may run in (a flavor offered in several pools or clusters); empty: any pool
    # its node selector and kind allow.
    pools: tuple[str, ...] = ()
    cpu_millicores: int = 0
    memory_mib: int = 0
    distributed: bool = False
    owner: str = ""
    queued_at: float | None = None
    reserved_start_at: float | None = None

    def waiting_since(self) -> float:
        """When its current wait in the queue began."""
        return self.submitted_at if self.queued_at is None else self.queued_at


@dataclass(frozen=True, slots=True)
class Flavor:
    """A sellable GPU shape. `gpu_model` None means any model; `gpu_equivalent` is per GPU.

    `pools` names the pools that offer it (empty: every pool of its sharing mode); the quota
    ledger counts their cards as the flavor's capacity.  `display_name` is what people call
    it, for sentences (Team's likewise).
    """

    id: str
    kind: FlavorKind
    gpu_model: str | None = None
    memory_mib: int = 0
    cores_percent: int = 0
    mig_profile: str | None = None
    gpu_equivalent: float = 1.0
    pools: tuple[str, ...] = ()
    display_name: str = ""

    @property
    def label(self) -> str:
        """The name people know it by (its id when it has none)."""
        return self.display_name or self.id


@dataclass(frozen=True, slots=True)
class Quota:
    """Guaranteed and limit (GE) of a team, or of one project of a team, for one flavor."""

    team: str
    flavor: str
    guaranteed: float
    limit: float
    project: str | None = None


@dataclass(frozen=True, slots=True)
class Team:
    """A team; teams of the same cohort lend each other idle guaranteed quota."""

    name: str
    cohort: str | None = None
    weight: float | None = None
    display_name: str = ""

    @property
    def label(self) -> str:  # the name people know it by (its id when it has none)
        return self.display_name or self.name


@dataclass(frozen=True, slots=True)
class Member:
    """A team member's weight in the fair share inside the team (members not listed weigh 1)."""

    team: str
    name: str
    weight: float = 1.0


@dataclass(frozen=True, slots=True)
class Snapshot:
    pools: tuple[Pool, ...]
    nodes: tuple[Node, ...]
    devices: tuple[GpuDevice, ...]
    flavors: tuple[Flavor, ...]
    teams: tuple[Team, ...] = ()
    quotas: tuple[Quota, ...] = ()
    allocations: tuple[Allocation, ...] = ()
    pending: tuple[Request, ...] = ()
    members: tuple[Member, ...] = ()


# ----------------------------------------------------------------------------- outputs


@dataclass(frozen=True, slots=True)
class Admission:
    request_id: str
    placement: tuple[DeviceClaim, ...]
    borrowed: bool
    preemptible: bool

    @property
    def node_ids(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c.node_id for c in self.placement))

    @property
    def devices_by_node(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        return tuple(
            (n, tuple(c.device_index for c in self.placement if c.node_id == n))
            for n in self.node_ids
        )


@dataclass(frozen=True, slots=True)
class Preemption:
    victim_id: str
    for_request: str
    reason: str


@dataclass(frozen=True, slots=True)
class Reservation:
    """Capacity held for `request_id` from `start_at` (EASY backfilling)."""

    request_id: str
    start_at: float
    placement: tuple[DeviceClaim, ...]


WaitCode = Literal["quota", "capacity", "reservation", "reserved", "invalid"]


@dataclass(frozen=True, slots=True)
class Waiting:
    """A request left pending. `position` is 1-based among waiting requests in the order the
    cycle considered them: within guarantee, borrowers, then quota-blocked (oldest first)."""

    request_id: str
    reason: str
    code: WaitCode
    position: int


@dataclass(frozen=True, slots=True)
class Plan:
    admissions: tuple[Admission, ...] = ()
    preemptions: tuple[Preemption, ...] = ()
    waiting: tuple[Waiting, ...] = ()
    reservations: tuple[Reservation, ...] = ()
    considered: int = 0


@dataclass(frozen=True, slots=True)
class Decision:
    """Outcome for one request from `Scheduler.place_one`."""

    request_id: str
    admission: Admission | None
    preemptions: tuple[Preemption, ...] = ()
    reason: str | None = None
    code: WaitCode | None = None


# ----------------------------------------------------------------------------- policy

QueueKey = Literal["priority", "fair_share", "age"]

DEFAULT_FILTERS: tuple[str, ...] = (
    "node_schedulable",
    "node_labels",
    "node_taints",
    "gpu_model",
    "shared_node",
    "host_resources",
    "capacity",
)
DEFAULT_SCORES: tuple[tuple[str, float], ...] = (
    ("node_packing", 1.0),
    ("node_size", 0.5),
    ("pool_affinity", 0.05),
    ("tier", 0.05),
    ("device_packing", 0.05),
    ("fragmentation", 0.05),
    ("tenancy_mix", 0.05),
    ("host_balance", 0.05),
)


@dataclass(frozen=True, slots=True)
class Policy:
    """Tunable behaviour of a cycle.

    `filters` and `scores` name plugins from `filters.NODE_FILTERS` / `scores.SCORES` in the
    order they run; `pool_scores` overrides the score list for a named pool and
    `pool_queue_order` the queue order for requests that can only run in that pool.
    `placer`: the plugin pipeline ("plugins"), best-fit ("best_fit") or FGD ("fgd", fgd.py).
    `max_candidates` bounds the spots scored per group; `pause_gc` pauses Python's cyclic
    garbage collector during a cycle (see planner.gc_paused).
    `reservation_wait_seconds`: how long a request blocked by capacity waits before it may hold
    a reservation (backfill.py); `priority_aging_seconds`: every that many seconds of waiting
    raise a request's queue priority one class, up to CRITICAL (0: no aging; queue.py);
    `fair_share_in_team`: order each team's line by its members' dominant shares (queue.py).
    """

    queue_order: tuple[QueueKey, ...] = ("priority", "fair_share", "age")
    pool_queue_order: tuple[tuple[str, tuple[QueueKey, ...]], ...] = ()
    fair_share_weighting: Literal["quota", "equal"] = "quota"
    filters: tuple[str, ...] = DEFAULT_FILTERS
    scores: tuple[tuple[str, float], ...] = DEFAULT_SCORES
    pool_scores: tuple[tuple[str, tuple[tuple[str, float], ...]], ...] = ()
    placer: Literal["plugins", "best_fit", "fgd"] = "plugins"
    enable_preemption: bool = True
    enable_backfill: bool = True
    max_reservations: int = 1
    max_candidates: int = 3
    pause_gc: bool = True
    reservation_wait_seconds: float = 0.0
    priority_aging_seconds: float = 0.0
    fair_share_in_team: bool = True
