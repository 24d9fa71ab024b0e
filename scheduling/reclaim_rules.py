"""Reclamation rules as pure functions: metric series and times in, a verdict with evidence out.

Nothing here reads the clock or the database, so every rule is tested with synthetic series.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

IdleStage = Literal["active", "unobserved", "warn", "reclaim"]
TimeoutStage = Literal["within", "warn", "stop"]


@dataclass(frozen=True, slots=True)
class IdleVerdict:
    """Where an allocation stands on the idle ladder, and the data behind it."""

    stage: IdleStage
    idle_since: float | None
    idle_seconds: float
    peak_activity_percent: float
    samples: int
    reclaim_at: float | None

    def evidence(self, *, threshold: float, window_seconds: float) -> dict[str, float | int | None]:
        return {
            "threshold_percent": threshold,
            "window_seconds": window_seconds,
            "idle_since": self.idle_since,
            "idle_seconds": round(self.idle_seconds, 1),
            "peak_activity_percent": round(self.peak_activity_percent, 2),
            "samples": self.samples,
        }


def idle_verdict(
    samples: Sequence[tuple[float, float]],
    *,
    now: float,
    started_at: float,
    threshold_percent: float,
    window_seconds: float,
    warning_seconds: float,
    warned_at: float | None,
    exempt_until: float | None = None,
) -> IdleVerdict:
    """The idle ladder for one allocation.

    1. Find the trailing run of samples under the threshold (`samples` are (time, percent),
       oldest first); it starts at the first such sample after the last busy one, or when the
       work started if it was never busy.
    2. Idle for `window - warning` seconds: warn (the owner sees the countdown).
    3. Idle for the whole window and warned at least `warning` seconds ago: reclaim.
    An exemption suspends the ladder; a sample over the threshold resets it.
    """
    if not samples:
        return IdleVerdict("unobserved", None, 0.0, 0.0, 0, None)
    idle_since: float | None = started_at
    peak = 0.0
    count = 0
    for moment, activity in samples:
        if activity >= threshold_percent:
            idle_since, peak, count = None, 0.0, 0
        else:
            if idle_since is None:
                idle_since = moment
            peak = max(peak, activity)
            count += 1
    if idle_since is None or count == 0:
        return IdleVerdict("active", None, 0.0, 0.0, 0, None)
    idle_seconds = max(0.0, now - idle_since)
    reclaim_at = idle_since + window_seconds
    if exempt_until is not None and now < exempt_until:
        return IdleVerdict("active", idle_since, idle_seconds, peak, count, None)
    if idle_seconds >= window_seconds and warned_at is not None:
        if now - warned_at >= warning_seconds:
            return IdleVerdict("reclaim", idle_since, idle_seconds, peak, count, reclaim_at)
        return IdleVerdict(
            "warn", idle_since, idle_seconds, peak, count, warned_at + warning_seconds
        )
    if idle_seconds >= window_seconds - warning_seconds:
        return IdleVerdict("warn", idle_since, idle_seconds, peak, count, reclaim_at)
    return IdleVerdict("active", idle_since, idle_seconds, peak, count, reclaim_at)


def timeout_stage(
    *, started_at: float, max_runtime_seconds: float, warning_seconds: float, now: float
) -> TimeoutStage:
    """Past the max runtime: stop; inside the warning period before it: warn."""
    elapsed = now - started_at
    if elapsed >= max_runtime_seconds:
        return "stop"
    if elapsed >= max_runtime_seconds - warning_seconds:
        return "warn"
    return "within"


def stuck_pending(*, launched_at: float, pending_timeout_seconds: float, now: float) -> bool:
    """A workload the cluster has not started long after launch is abnormal."""
    return now - launched_at >= pending_timeout_seconds


def crash_retry_delay_seconds(*, crashes: int, base_seconds: float, max_seconds: float) -> float:
    """How long crashed work waits before its next try: `base_seconds` after its first crash,
    doubling with each further crash of the same request, never more than `max_seconds`."""
    if crashes < 1:
        return 0.0
    return float(min(max_seconds, base_seconds * 2 ** min(crashes - 1, 32)))


@dataclass(frozen=True, slots=True)
class CrashSignature:
    """How an attempt crashed: the image it ran and its main container's last exit."""

    image: str
    exit_code: int | None
    exit_reason: str

    @property
    def is_known(self) -> bool:
        """An exit was seen (a code or the runtime's reason); an unknown one proves nothing."""
        return self.exit_code is not None or bool(self.exit_reason)

    def describe(self) -> str:
        """The exit in words: "OOMKilled (exit code 137)", "exit code 1", "an unknown exit"."""
        code = f"exit code {self.exit_code}" if self.exit_code is not None else ""
        if self.exit_reason:
            return f"{self.exit_reason} ({code})" if code else self.exit_reason
        return code or "an unknown exit"


def crashed_the_same_way(previous: CrashSignature | None, current: CrashSignature) -> bool:
    """The same image crashed with the same exit as its last crash: another try would too."""
    return previous is not None and current.is_known and previous == current
