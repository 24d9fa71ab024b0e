"""MIG as NVIDIA sells it: one table of the profiles each GPU offers, and what follows from it.

`MIG_GPUS` maps the portal's short GPU model (`H100-80G`, as flavors and nodes name it) onto
the card's MIG geometry, from NVIDIA's MIG user guide ("Supported MIG Profiles"): how many
compute and memory slices the card has, and per profile its compute slices, memory slices,
memory and the placements a GPU instance of it may take.  A placement is a start index on the
card's memory slices (8 on the 7-slice cards, 4 on the A30) and occupies as many of them as the
profile has memory slices, exactly as `nvidia-smi mig -lgipp` lists them (`{0,2,4,6}:2`).
Media-extension profiles (`+me`) are not sold and not listed.

From the table: which profiles a GPU takes (`profile_problem`, used to validate flavors),
whether a card layout can be placed (`layout_fits`), the GPU operator's named mig-parted
configs (`builtin_configs`: `all-<profile>`, `all-balanced`, `all-disabled`), the layout of a
node read from its `nvidia.com/mig.config` label and advertised `nvidia.com/mig-<profile>`
counts (`read_node_layout`), and a suggested layout per node for the MIG demand that waits
(`plan_mig_layouts`).  Pure: no Django, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache

#: The label the GPU operator's MIG manager reads: the mig-parted config a node should have.
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
#: The MIG manager's progress on that label: pending, rebooting, success or failed.
MIG_CONFIG_STATE_LABEL = "nvidia.com/mig.config.state"


@dataclass(frozen=True, slots=True)
class MigShape:
    """One MIG profile on one GPU: its slices, memory and legal placements (memory-slice starts)."""

    name: str
    compute_slices: int
    memory_slices: int
    memory_gb: int
    starts: tuple[int, ...]

    def bits(self, start: int) -> int:
        """The memory slices an instance starting at `start` occupies, as a bitmask."""
        return ((1 << self.memory_slices) - 1) << start


@dataclass(frozen=True, slots=True)
class MigGpu:
    """A MIG-capable GPU: its slices, its profiles, and the layout NVIDIA calls balanced."""

    model: str
    memory_gb: int
    compute_slices: int
    memory_slices: int
    profiles: tuple[MigShape, ...]
    balanced: tuple[tuple[str, int], ...]

    def profile(self, name: str) -> MigShape | None:
        return next((p for p in self.profiles if p.name == name), None)

    @property
    def profile_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.profiles)


def _seven_slice(model: str, memory_gb: int, sizes: tuple[int, int, int, int, int, int]) -> MigGpu:
    """A100/H100/H200/B200 geometry: 7 compute and 8 memory slices; `sizes` are the memory (GB)
    of the 1g, 1g (double memory), 2g, 3g, 4g and 7g profiles, which name them."""
    one, one_big, two, three, four, seven = sizes
    profiles = (
        MigShape(f"1g.{one}gb", 1, 1, one, (0, 1, 2, 3, 4, 5, 6)),
        MigShape(f"1g.{one_big}gb", 1, 2, one_big, (0, 2, 4, 6)),
        MigShape(f"2g.{two}gb", 2, 2, two, (0, 2, 4)),
        MigShape(f"3g.{three}gb", 3, 4, three, (0, 4)),
        MigShape(f"4g.{four}gb", 4, 4, four, (0,)),
        MigShape(f"7g.{seven}gb", 7, 8, seven, (0,)),
    )
    balanced = ((f"1g.{one}gb", 2), (f"2g.{two}gb", 1), (f"3g.{three}gb", 1))
    return MigGpu(model, memory_gb, 7, 8, profiles, balanced)


#: Short GPU model → its MIG geometry (NVIDIA MIG user guide, "Supported MIG Profiles").
MIG_GPUS: dict[str, MigGpu] = {
    gpu.model: gpu
    for gpu in (
        _seven_slice("A100-40G", 40, (5, 10, 10, 20, 20, 40)),
        _seven_slice("A100-80G", 80, (10, 20, 20, 40, 40, 80)),
        _seven_slice("H100-80G", 80, (10, 20, 20, 40, 40, 80)),
        _seven_slice("H100-94G", 94, (12, 24, 24, 47, 47, 94)),
        _seven_slice("H100-96G", 96, (12, 24, 24, 48, 48, 96)),
        _seven_slice("H200-141G", 141, (18, 35, 35, 71, 71, 141)),
        _seven_slice("B200-180G", 180, (23, 45, 45, 90, 90, 180)),
        MigGpu(
            "A30",
            24,
            4,
            4,
            (
                MigShape("1g.6gb", 1, 1, 6, (0, 1, 2, 3)),
                MigShape("2g.12gb", 2, 2, 12, (0, 2)),
                MigShape("4g.24gb", 4, 4, 24, (0,)),
            ),
            (("1g.6gb", 2), ("2g.12gb", 1)),
        ),
    )
}


def mig_gpu(model: str | None) -> MigGpu | None:
    """The MIG geometry of a short GPU model, or None when the card has no MIG."""
    return MIG_GPUS.get(model or "")


def all_profile_names() -> tuple[str, ...]:
    """Every profile name any GPU of the table offers, sorted by compute slices then name."""
    shapes = {p.name: p for gpu in MIG_GPUS.values() for p in gpu.profiles}
    return tuple(sorted(shapes, key=lambda n: (shapes[n].compute_slices, shapes[n].memory_gb, n)))


def compute_slices_of(profile: str) -> int:
    """Compute slices of a profile name (`3g.40gb` → 3), from the table; 0 when unknown."""
    return next(
        (p.compute_slices for gpu in MIG_GPUS.values() for p in gpu.profiles if p.name == profile),
        0,
    )


def profile_share(profile: str) -> tuple[int, int] | None:
    """A profile's compute slices and its card's (`3g.40gb` → (3, 7), `2g.12gb` → (2, 4)),
    or None when no card of the table offers it."""
    for gpu in MIG_GPUS.values():
        shape = gpu.profile(profile)
        if shape is not None:
            return shape.compute_slices, gpu.compute_slices
    return None


def profile_problem(model: str | None, profile: str) -> str:
    """Why `profile` cannot be sold on `model`, or "" when NVIDIA offers it there."""
    gpu = mig_gpu(model)
    if gpu is None:
        known = ", ".join(sorted(MIG_GPUS))
        return f"GPU model {model or '(none)'} has no MIG profiles; MIG is sold on {known}."
    if gpu.profile(profile) is None:
        return (
            f"{gpu.model} offers no MIG profile {profile!r}; "
            f"it offers {', '.join(gpu.profile_names)}."
        )
    return ""


# ----------------------------------------------------------------------------- card layouts


def _placements(
    gpu: MigGpu, instances: list[MigShape], used: int, out: list[int] | None
) -> list[int] | None:
    """Place `instances` (largest first) on free memory slices; the starts, or None."""
    if not instances:
        return out or []
    shape, rest = instances[0], instances[1:]
    for start in shape.starts:
        bits = shape.bits(start)
        if not used & bits:
            found = _placements(gpu, rest, used | bits, [*(out or []), start])
            if found is not None:
                return found
    return None


def layout_starts(gpu: MigGpu, layout: Mapping[str, int]) -> tuple[tuple[str, int], ...] | None:
    """Where each instance of a card `layout` (profile → count) goes: (profile, start) pairs,
    largest first; None when the layout names a profile the card lacks or cannot be placed."""
    instances: list[MigShape] = []
    for name, count in layout.items():
        shape = gpu.profile(name)
        if shape is None or count < 0:
            return None
        instances += [shape] * count
    instances.sort(key=lambda s: (-s.memory_slices, -s.compute_slices, s.name))
    starts = _placements(gpu, instances, 0, None)
    if starts is None:
        return None
    return tuple((s.name, start) for s, start in zip(instances, starts, strict=True))


def layout_fits(gpu: MigGpu, layout: Mapping[str, int]) -> bool:
    """Whether one card of `gpu` can hold every instance of `layout` at once."""
    return layout_starts(gpu, layout) is not None


def max_instances(gpu: MigGpu, profile: str) -> int:
    """How many instances of `profile` one card holds when it holds nothing else."""
    count = 0
    while layout_fits(gpu, {profile: count + 1}):
        count += 1
    return count


@cache
def builtin_configs(model: str) -> dict[str, dict[str, int]]:
    """The GPU operator's stock mig-parted configs for `model`, as one card's layout:
    `all-disabled`, `all-<profile>` (as many as fit) and `all-balanced`."""
    gpu = mig_gpu(model)
    if gpu is None:
        return {}
    configs: dict[str, dict[str, int]] = {"all-disabled": {}}
    for shape in gpu.profiles:
        configs[f"all-{shape.name}"] = {shape.name: max_instances(gpu, shape.name)}
    configs["all-balanced"] = dict(gpu.balanced)
    return configs


@cache
def maximal_layouts(model: str) -> tuple[tuple[tuple[str, int], ...], ...]:
    """Every card layout of `model` to which no further instance can be added, sorted."""
    gpu = mig_gpu(model)
    if gpu is None:
        return ()
    found: set[tuple[tuple[str, int], ...]] = set()

    def grow(used: int, counts: dict[str, int], smallest: int) -> None:
        grown = False
        for index, shape in enumerate(gpu.profiles):
            for start in shape.starts:
                if not used & shape.bits(start):
                    grown = True
                    if index >= smallest:
                        counts[shape.name] = counts.get(shape.name, 0) + 1
                        grow(used | shape.bits(start), counts, index)
                        counts[shape.name] -= 1
                        if not counts[shape.name]:
                            del counts[shape.name]
                    break
        if not grown:
            found.add(tuple(sorted(counts.items())))

    grow(0, {}, 0)
    return tuple(sorted(found))


def config_name(model: str, layout: Mapping[str, int]) -> str:
    """The stock config name of a card layout, or a descriptive custom name
    (`custom-4x1g.10gb-1x3g.40gb`) for one the GPU operator does not ship."""
    wanted = {p: n for p, n in layout.items() if n}
    for name, config in builtin_configs(model).items():
        if config == wanted:
            return name
    parts = sorted(wanted.items(), key=lambda item: (compute_slices_of(item[0]), item[0]))
    return "custom-" + "-".join(f"{n}x{p}" for p, n in parts)


# ----------------------------------------------------------------------------- reading a node


@dataclass(frozen=True, slots=True)
class LayoutReading:
    """A node's MIG layout as read from the cluster: one layout per card, or why not.

    `source` says what the layout came from: `label` (a config the portal knows, matching the
    advertised counts) or `resources` (the advertised counts packed onto the cards).
    """

    cards: tuple[dict[str, int], ...] = ()
    problem: str = ""
    source: str = ""
    config: str = ""


def _pack(gpu: MigGpu, gpu_count: int, counts: Mapping[str, int]) -> list[dict[str, int]] | None:
    """Spread node-level instance counts over `gpu_count` cards, largest profiles first, each
    on the first card that can still hold it (first-fit decreasing); None when they do not fit.
    """
    cards: list[dict[str, int]] = [{} for _ in range(gpu_count)]
    if any(gpu.profile(p) is None for p in counts):
        return None
    shapes = sorted(
        ((shape, n) for p, n in counts.items() if n > 0 and (shape := gpu.profile(p))),
        key=lambda item: (-item[0].memory_slices, -item[0].compute_slices, item[0].name),
    )
    for shape, count in shapes:
        for _ in range(count):
            for card in cards:
                trial = {**card, shape.name: card.get(shape.name, 0) + 1}
                if layout_fits(gpu, trial):
                    card[shape.name] = trial[shape.name]
                    break
            else:
                return None
    return cards


def read_node_layout(
    *,
    gpu_model: str | None,
    gpu_count: int,
    labels: Mapping[str, str],
    advertised: Mapping[str, int],
) -> LayoutReading:
    """The per-card MIG layout of a node, from its labels and advertised MIG resources.

    1. The card must be in the table and every advertised profile one of its own.
    2. A MIG manager that is still applying (or failed to apply) the label's config leaves the
       layout unknown.
    3. When `nvidia.com/mig.config` names a stock config of the card and the node advertises
       exactly what that config gives its cards, every card has that layout.
    4. Otherwise the advertised counts are the truth: they are packed onto the cards, largest
       profile first; counts that no set of card layouts holds, or a known config the counts
       contradict, leave the layout unknown.
    """
    gpu = mig_gpu(gpu_model)
    counts = {p: n for p, n in advertised.items() if n > 0}
    config = labels.get(MIG_CONFIG_LABEL, "")
    if gpu is None:
        return LayoutReading(
            problem=f"GPU model {gpu_model or 'unknown'} is not in the MIG profile table.",
            config=config,
        )
    foreign = sorted(p for p in counts if gpu.profile(p) is None)
    if foreign:
        return LayoutReading(
            problem=f"the node advertises {', '.join(foreign)}, which {gpu.model} does not offer.",
            config=config,
        )
    state = labels.get(MIG_CONFIG_STATE_LABEL, "")
    if state in ("pending", "rebooting", "failed"):
        return LayoutReading(
            problem=f"the MIG manager reports {MIG_CONFIG_STATE_LABEL}={state} for {config!r}.",
            config=config,
        )
    if gpu_count <= 0:
        return LayoutReading(problem="the node reports no GPUs.", config=config)
    stock = builtin_configs(gpu.model).get(config)
    if stock is not None:
        expected = {p: n * gpu_count for p, n in stock.items() if n}
        if expected != counts:
            return LayoutReading(
                problem=(
                    f"{MIG_CONFIG_LABEL}={config} gives {_counts(expected)} on {gpu_count} "
                    f"cards, but the node advertises {_counts(counts)}."
                ),
                config=config,
            )
        return LayoutReading(
            cards=tuple(dict(stock) for _ in range(gpu_count)), source="label", config=config
        )
    packed = _pack(gpu, gpu_count, counts)
    if packed is None:
        return LayoutReading(
            problem=f"{_counts(counts)} do not fit on {gpu_count} {gpu.model} cards.",
            config=config,
        )
    return LayoutReading(cards=tuple(packed), source="resources", config=config)


def _counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{n} x {p}" for p, n in sorted(counts.items())) or "no MIG instances"


# ----------------------------------------------------------------------------- layout planner


@dataclass(frozen=True, slots=True)
class PlanNode:
    """A MIG node as the planner sees it: its card, its cards' current layouts and config."""

    name: str
    pool: str
    gpu_model: str
    cards: tuple[Mapping[str, int], ...]
    config: str = ""


@dataclass(frozen=True, slots=True)
class NodeSuggestion:
    """The config the planner suggests for one node, and the waiting instances it would serve.

    `cards` is the suggested layout of each card (the current one when nothing changes)."""

    node: str
    pool: str
    gpu_model: str
    current_config: str
    current_cards: tuple[dict[str, int], ...]
    config: str
    cards: tuple[dict[str, int], ...]
    serves: dict[str, int]

    @property
    def changes(self) -> bool:
        return self.cards != self.current_cards


@dataclass(frozen=True, slots=True)
class MigPlan:
    """Suggested layouts per node, the demand they serve, and the demand no node here can."""

    nodes: tuple[NodeSuggestion, ...]
    demand: dict[tuple[str, str], int] = field(default_factory=dict)
    unserved: dict[tuple[str, str], int] = field(default_factory=dict)


def _serve(
    pool: str, cards: Sequence[Mapping[str, int]], remaining: Mapping[tuple[str, str], int]
) -> dict[str, int]:
    """What `cards` would serve of the pool's remaining demand, per profile."""
    total: dict[str, int] = {}
    for card in cards:
        for p, n in card.items():
            total[p] = total.get(p, 0) + n
    served = {p: min(n, remaining.get((pool, p), 0)) for p, n in sorted(total.items())}
    return {p: n for p, n in served.items() if n}


def plan_mig_layouts(nodes: Iterable[PlanNode], demand: Mapping[tuple[str, str], int]) -> MigPlan:
    """A mig.config per node that serves the waiting MIG demand; a suggestion, never applied.

    `demand` counts instances wanted per (pool, profile).  Per pool, nodes in name order:
    1. Each node gets the one card layout (the same on all its cards, as the stock configs
       have) that serves most of the pool's demand still unserved, weighed in compute slices;
       ties keep the node's current layout, then waste fewer compute slices.
    2. A node whose current layout serves as much as the best keeps it (no change suggested).
    3. Demand of a profile the pool's card does not offer, or beyond every node, is `unserved`.
    """
    remaining = {key: n for key, n in demand.items() if n > 0}
    out: list[NodeSuggestion] = []

    def weight(served: Mapping[str, int]) -> int:
        return sum(n * compute_slices_of(p) for p, n in served.items())

    for node in sorted(nodes, key=lambda n: (n.pool, n.name)):
        gpu = mig_gpu(node.gpu_model)
        current = tuple(dict(card) for card in node.cards)
        best, best_key = current, (weight(_serve(node.pool, current, remaining)), 1, 0)
        if gpu is not None and current:
            for candidate in maximal_layouts(gpu.model):
                cards = tuple(dict(candidate) for _ in current)
                used = sum(compute_slices_of(p) * n for p, n in candidate)
                key = (weight(_serve(node.pool, cards, remaining)), 0, used)
                if key > best_key:
                    best, best_key = cards, key
        serves = _serve(node.pool, best, remaining)
        for p, n in serves.items():
            remaining[(node.pool, p)] -= n
        config = node.config
        if best != current and gpu is not None:
            config = config_name(gpu.model, best[0])
        out.append(
            NodeSuggestion(
                node=node.name,
                pool=node.pool,
                gpu_model=node.gpu_model,
                current_config=node.config,
                current_cards=current,
                config=config,
                cards=best,
                serves=serves,
            )
        )
    unserved = {key: n for key, n in remaining.items() if n > 0}
    return MigPlan(nodes=tuple(out), demand=dict(demand), unserved=unserved)
