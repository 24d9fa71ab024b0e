"""Replay the last days under the current policy and a changed one, side by side.

Read (`recorded_trace`): the fleet as it is now (`build_snapshot`), the work that was running when
the window opened (its allocation's claims, until its allocation ended), and every request that
joined the queue in the window or was still waiting when it opened: when it was queued, how long
its last run took, when it was cancelled if it never started. Decide: `scheduling.engine.replay`
under `scheduling.services.cycle.POLICY` and under that policy with a `PolicyChange`. Nothing is
written.

A policy change is a JSON or YAML mapping (`load_policy_change`)::

    team_weights: {ml-research: 2.0}               # a team's fair-share weight
    quotas:                                        # in flavor units, as on the quotas page
      - {team: ml-research, flavor: a100-80g, guaranteed: 8, limit: 16}
    short_reserve: {a100-training: 0.1}            # share of a pool kept for short requests
    scoring: {a100-training: spread}               # binpack or spread per pool
    preemption: false                              # preemption on or off
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import yaml
from django.conf import settings
from django.db.models import Q

from scheduling.choices import RequestStatus
from scheduling.engine.replay import (
    PolicyChange,
    ReplayResult,
    RunningAtStart,
    Submission,
    Trace,
    replay,
)
from scheduling.engine.types import Quota, Snapshot
from scheduling.models import Allocation, GpuRequest, Tier
from scheduling.selectors.snapshot import (
    ALLOCATION_FIELDS,
    PENDING_FIELDS,
    build_snapshot,
    engine_allocation,
    engine_request,
    offered_pools,
)
from scheduling.services.cycle import POLICY

WITHDRAWN = (RequestStatus.CANCELLED, RequestStatus.EXPIRED, RequestStatus.REJECTED)
HISTORY_FIELDS = ("status", "queued_at", "approved_at", "started_at", "finished_at", "updated_at")
#: The admin page replays in the request up to this size; larger windows go to the command.
#: A day of the 200-node benchmark fleet (27,901 submissions) replays in about 3 s of CPU
#: (docs/benchmarks.md, Policy replay); the page reads the window's history and replays it twice
#: (current and changed), so 2,000 submissions keep the wait to a few seconds.
PAGE_MAX_SUBMISSIONS = 2_000
PAGE_MAX_NODES = 200


class PolicyFileError(ValueError):
    """The policy change cannot be read or names what does not exist; the message says which."""


@dataclass(frozen=True, slots=True)
class Comparison:
    trace: Trace
    change: PolicyChange
    current: ReplayResult
    changed: ReplayResult | None
    tier_names: dict[int, str]


# ----------------------------------------------------------------------------- read


def recorded_trace(*, days: float, now: datetime) -> Trace:
    """The last `days` before `now` as the replay's input (see the module docstring)."""
    start = now - timedelta(days=days)
    fleet = build_snapshot()
    offered = offered_pools()
    # 1. What ran when the window opened: each request's first attempt then, with its claims.
    allocations: dict[int, dict[str, Any]] = {}
    for row in (
        Allocation.objects.filter(Q(ended_at__isnull=True) | Q(ended_at__gt=start))
        .filter(Q(started_at__lt=start) | Q(started_at__isnull=True, admitted_at__lt=start))
        .exclude(claims=[])
        .order_by("request_id", "attempt")
        .values(*ALLOCATION_FIELDS, "ended_at")
    ):
        allocations.setdefault(row["request_id"], row)
    requests = {
        row["pk"]: row
        for row in GpuRequest.objects.filter(pk__in=list(allocations)).values(*PENDING_FIELDS)
    }
    running = tuple(
        RunningAtStart(
            request=engine_request(requests[pk], offered),
            allocation=engine_allocation(row),
            ends_at=row["ended_at"].timestamp() if row["ended_at"] else None,
        )
        for pk, row in allocations.items()
    )
    # 2. What joined the queue in the window, or still waited when it opened.
    submissions = []
    for row in (
        GpuRequest.objects.filter(queued_at__isnull=False, queued_at__lt=now)
        .filter(Q(queued_at__gte=start) | Q(started_at__isnull=True) | Q(started_at__gte=start))
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gte=start))
        .exclude(pk__in=list(allocations))
        .order_by("queued_at", "pk")
        .values(*PENDING_FIELDS, *HISTORY_FIELDS)
    ):
        began, ended = row["started_at"], row["finished_at"]
        ran = (ended - began).total_seconds() if began and ended and ended > began else None
        withdrawn = None
        if row["status"] in WITHDRAWN and began is None:
            withdrawn = (ended or row["updated_at"]).timestamp()
        # A preempted request is queued again (queued_at moves); it first joined the queue
        # when it was approved, or submitted if it needed no approval.
        joined = min(row["queued_at"], row["approved_at"] or row["created_at"])
        submissions.append(
            Submission(
                request=engine_request(row, offered),
                queued_at=joined.timestamp(),
                runtime_seconds=ran,
                withdrawn_at=withdrawn,
            )
        )
    return Trace(
        fleet=replace(fleet, allocations=(), pending=()),
        start=start.timestamp(),
        end=now.timestamp(),
        submissions=tuple(submissions),
        running=running,
    )


def load_policy_change(text: str, *, fleet: Snapshot) -> PolicyChange:
    """Parse a JSON or YAML policy change and check it against `fleet`; PolicyFileError says
    what is wrong."""
    try:
        data = json.loads(text) if text.lstrip().startswith("{") else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise PolicyFileError(f"The policy is neither valid JSON nor valid YAML: {exc}") from exc
    if data is None:
        return PolicyChange()
    if not isinstance(data, dict):
        raise PolicyFileError("The policy must be a mapping of changes (team_weights, quotas, …).")
    known = {"team_weights", "quotas", "short_reserve", "scoring", "preemption"}
    unknown = sorted(set(map(str, data)) - known)
    if unknown:
        raise PolicyFileError(
            f"Unknown policy key(s): {', '.join(unknown)}; use {', '.join(sorted(known))}."
        )
    teams = {t.name for t in fleet.teams}
    pools = {p.name for p in fleet.pools}
    flavors = {f.id: f for f in fleet.flavors}
    weights = _mapping(data, "team_weights")
    reserve = _mapping(data, "short_reserve")
    scoring = _mapping(data, "scoring")
    for team, weight in weights.items():
        _known(team, teams, "team")
        if _number(weight, f"team_weights.{team}") <= 0:
            raise PolicyFileError(f"team_weights.{team} must be above 0.")
    for pool, fraction in reserve.items():
        _known(pool, pools, "pool")
        if not 0 <= _number(fraction, f"short_reserve.{pool}") < 1:
            raise PolicyFileError(f"short_reserve.{pool} must be at least 0 and below 1.")
    for pool, mode in scoring.items():
        _known(pool, pools, "pool")
        if mode not in ("binpack", "spread"):
            raise PolicyFileError(f"scoring.{pool} must be binpack or spread, not {mode!r}.")
    quotas = []
    raw_quotas = data.get("quotas") or []
    if not isinstance(raw_quotas, list):
        raise PolicyFileError("quotas must be a list of {team, flavor, guaranteed, limit}.")
    for i, item in enumerate(raw_quotas):
        if not isinstance(item, dict) or not {"team", "flavor", "guaranteed", "limit"} <= set(item):
            raise PolicyFileError(f"quotas[{i}] needs team, flavor, guaranteed and limit.")
        _known(str(item["team"]), teams | {q.team for q in fleet.quotas}, "team")
        flavor = flavors.get(str(item["flavor"]))
        if flavor is None:
            raise PolicyFileError(f"quotas[{i}]: there is no flavor {item['flavor']!r}.")
        guaranteed = _number(item["guaranteed"], f"quotas[{i}].guaranteed")
        limit = _number(item["limit"], f"quotas[{i}].limit")
        if guaranteed < 0 or limit < guaranteed:
            raise PolicyFileError(f"quotas[{i}]: need 0 <= guaranteed <= limit.")
        quotas.append(
            Quota(
                team=str(item["team"]),
                flavor=flavor.id,
                guaranteed=guaranteed * flavor.gpu_equivalent,
                limit=limit * flavor.gpu_equivalent,
                project=item.get("project"),
            )
        )
    preemption = data.get("preemption")
    if preemption is not None and not isinstance(preemption, bool):
        raise PolicyFileError("preemption must be true or false.")
    return PolicyChange(
        team_weights=tuple(sorted((str(t), float(w)) for t, w in weights.items())),
        quotas=tuple(quotas),
        short_reserve=tuple(sorted((str(p), float(f)) for p, f in reserve.items())),
        pool_scoring=tuple(sorted((str(p), m) for p, m in scoring.items())),
        enable_preemption=preemption,
    )


def _mapping(data: dict[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key) or {}
    if not isinstance(value, dict):
        raise PolicyFileError(f"{key} must be a mapping of name to value.")
    return {str(k): v for k, v in value.items()}


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PolicyFileError(f"{where} must be a number, not {value!r}.")
    return float(value)


def _known(name: str, names: set[str], kind: str) -> None:
    if name not in names:
        raise PolicyFileError(f"There is no {kind} {name!r}.")


# ----------------------------------------------------------------------------- decide


def compare_policies(*, trace: Trace, change: PolicyChange) -> Comparison:
    """Replay `trace` under the current policy, and under `change` when it changes anything."""
    cycle = float(settings.SCHEDULING_CYCLE_SECONDS)
    current = replay(trace, policy=POLICY, cycle_seconds=cycle)
    changed = None
    if not change.is_empty:
        changed = replay(trace, policy=POLICY, change=change, cycle_seconds=cycle)
    names: dict[int, list[str]] = {}
    for rank, name in Tier.objects.order_by("rank", "name").values_list("rank", "name"):
        names.setdefault(rank, []).append(name)
    return Comparison(
        trace=trace,
        change=change,
        current=current,
        changed=changed,
        tier_names={rank: ", ".join(n) for rank, n in names.items()},
    )


def too_large_for_page(trace: Trace) -> str | None:
    """Why this window is too large to replay inside a page request, or None."""
    if len(trace.fleet.nodes) > PAGE_MAX_NODES or len(trace.submissions) > PAGE_MAX_SUBMISSIONS:
        return (
            f"{len(trace.fleet.nodes)} nodes and {len(trace.submissions)} submissions are more "
            f"than this page replays while you wait (up to {PAGE_MAX_NODES} nodes and "
            f"{PAGE_MAX_SUBMISSIONS} submissions); run manage.py replay --days N --policy FILE."
        )
    return None


# ----------------------------------------------------------------------------- present


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def comparison_rows(comparison: Comparison) -> list[tuple[str, str, str]]:
    """(figure, current, changed) lines for the table; changed is "" without a change."""
    results = [comparison.current, comparison.changed]
    tiers = sorted({w.tier for r in results if r is not None for w in r.waits})

    def cell(result: ReplayResult | None, value: Any) -> str:
        return "" if result is None else value(result)

    def wait(tier: int, pct: str) -> Any:
        def get(r: ReplayResult) -> str:
            w = next((w for w in r.waits if w.tier == tier), None)
            if w is None:
                return "–"
            return _duration(w.p50_seconds if pct == "p50" else w.p90_seconds)

        return get

    rows: list[tuple[str, Any]] = []
    for tier in tiers:
        name = comparison.tier_names.get(tier, "no pool" if tier < 0 else f"rank {tier}")
        rows.append((f"wait p50, tier {name}", wait(tier, "p50")))
        rows.append((f"wait p90, tier {name}", wait(tier, "p90")))
    rows += [
        ("GPU-equivalent utilisation", lambda r: f"{r.utilisation:.1%}"),
        ("fair-share gap", lambda r: f"{r.fair_share_gap_points:.2f} points"),
        ("preemptions", lambda r: str(r.preemptions)),
        ("stranded GPU-hours", lambda r: f"{r.stranded_gpu_hours:.1f}"),
        ("started / submitted", lambda r: f"{r.started} / {r.submitted}"),
        ("still waiting at the end", lambda r: str(r.waiting_at_end)),
        ("cycles", lambda r: str(r.cycles)),
    ]
    return [
        (label, cell(comparison.current, get), cell(comparison.changed, get)) for label, get in rows
    ]


def comparison_json(comparison: Comparison) -> dict[str, Any]:
    trace = comparison.trace
    return {
        "window": {
            "start": trace.start,
            "end": trace.end,
            "submissions": len(trace.submissions),
            "running_at_start": len(trace.running),
            "nodes": len(trace.fleet.nodes),
        },
        "tiers": {str(k): v for k, v in sorted(comparison.tier_names.items())},
        "current": comparison.current.summary(),
        "changed": comparison.changed.summary() if comparison.changed else None,
    }
