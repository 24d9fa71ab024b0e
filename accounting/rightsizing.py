"""Right-sizing: would a finished run have fit a smaller flavor? A pure function, no Django.

A run fits a flavor when its peak memory and its peak compute share, each with headroom, fit
the flavor's memory and compute share (`cores_percent`: 100 for a whole card, the SM share of a
vGPU, the slice's share for MIG). Activity is measured against what the run held, so the compute
it needed is peak activity × the share it held. The smallest fitting flavor by GPU-equivalents
wins. Across GPU models one percent of a card is treated as equal: a deliberate simplification,
tempered by the headroom, so a suggestion is a hint for the next run, never an automatic move.

Only flavors of the run's own tier are offered (another tier has other rules, approvals and
reclaim policy), and only cheaper ones: by their price per hour when both are priced, else by
GPU-equivalents.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

HEADROOM = 1.2
MIN_SAMPLES = 3


@dataclass(frozen=True, slots=True)
class FlavorOption:
    name: str
    memory_mib: int
    cores_percent: int
    gpu_equivalent: Decimal
    tier: str = ""
    price_per_hour: Decimal | None = None


@dataclass(frozen=True, slots=True)
class RunProfile:
    """What one finished run held (per GPU) and the peaks its samples showed."""

    flavor_name: str
    gpu_count: int
    held_cores_percent: int
    held_gpu_equivalent: Decimal
    peak_memory_mib: int | None
    peak_activity_percent: float
    sample_count: int
    tier: str = ""
    held_price_per_hour: Decimal | None = None


@dataclass(frozen=True, slots=True)
class Suggestion:
    flavor_name: str
    gpu_equivalent: Decimal
    saving_percent: int
    reason: str


def suggest_smaller_flavor(run: RunProfile, options: Sequence[FlavorOption]) -> Suggestion | None:
    """The smallest flavor the run would have fit with headroom, if smaller than what it held.

    1. Too little evidence (fewer than MIN_SAMPLES samples, no memory figure) or several GPUs
       (their split is unknown): no suggestion.
    2. Needs: peak memory × HEADROOM; peak activity × held share × HEADROOM.
    3. Of the options of the run's tier that meet both and cost less than what was held,
       take the cheapest (the lightest when unpriced).
    """
    if run.sample_count < MIN_SAMPLES or run.peak_memory_mib is None or run.gpu_count != 1:
        return None
    memory_needed = run.peak_memory_mib * HEADROOM
    cores_needed = run.peak_activity_percent * run.held_cores_percent / 100 * HEADROOM
    fitting = [
        option
        for option in options
        if option.tier == run.tier
        and option.memory_mib >= memory_needed
        and option.cores_percent >= cores_needed
        and _cheaper(option, run)
    ]
    if not fitting:
        return None
    best = min(fitting, key=lambda option: (_weight(option, run), option.name))
    saving = int((1 - best.gpu_equivalent / run.held_gpu_equivalent) * 100)
    reason = (
        f"peak {run.peak_memory_mib} MiB and {run.peak_activity_percent:.0f} % activity of "
        f"{run.flavor_name} fit {best.name} ({best.memory_mib} MiB, {best.cores_percent} % "
        f"compute) with {int((HEADROOM - 1) * 100)} % headroom"
    )
    return Suggestion(best.name, best.gpu_equivalent, saving, reason)


def _priced(option: FlavorOption, run: RunProfile) -> bool:
    return option.price_per_hour is not None and run.held_price_per_hour is not None


def _weight(option: FlavorOption, run: RunProfile) -> Decimal:
    """What an option costs to compare: its price when both sides are priced, else its size."""
    if _priced(option, run):
        assert option.price_per_hour is not None
        return option.price_per_hour
    return option.gpu_equivalent


def _cheaper(option: FlavorOption, run: RunProfile) -> bool:
    if _priced(option, run):
        assert option.price_per_hour is not None and run.held_price_per_hour is not None
        return option.price_per_hour < run.held_price_per_hour
    return option.gpu_equivalent < run.held_gpu_equivalent
