"""`manage.py replay --days 7 [--policy FILE] [--json]`: the last days replayed through the
planner under the current policy and under a changed one, side by side (see docs/replay.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from scheduling.engine.replay import PolicyChange
from scheduling.services.policy_replay import (
    PolicyFileError,
    compare_policies,
    comparison_json,
    comparison_rows,
    load_policy_change,
    recorded_trace,
)


class Command(BaseCommand):
    help = (
        "Replay the recorded submissions of the last days under the current and a changed policy."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--days", type=float, default=7.0, help="window length (default 7)")
        parser.add_argument(
            "--policy",
            type=Path,
            help="JSON or YAML file: team_weights, quotas, short_reserve, scoring, preemption",
        )
        parser.add_argument("--json", action="store_true", help="print the figures as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        days = float(options["days"])
        if not 0 < days <= 31:
            raise CommandError("--days must be above 0 and at most 31.")
        trace = recorded_trace(days=days, now=timezone.now())
        change = PolicyChange()
        if options["policy"] is not None:
            path: Path = options["policy"]
            try:
                text = path.read_text()
            except OSError as exc:
                raise CommandError(f"Cannot read the policy file {path}: {exc}") from exc
            try:
                change = load_policy_change(text, fleet=trace.fleet)
            except PolicyFileError as exc:
                raise CommandError(f"{path}: {exc}") from exc
        comparison = compare_policies(trace=trace, change=change)
        if options["json"]:
            self.stdout.write(json.dumps(comparison_json(comparison), indent=2))
            return
        self.stdout.write(
            f"replayed {days:g} days: {len(trace.submissions)} submissions, "
            f"{len(trace.running)} running at the start, {len(trace.fleet.nodes)} nodes"
        )
        rows = comparison_rows(comparison)
        header = ("figure", "current", "changed" if comparison.changed else "")
        width = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]
        for line in [header, *rows]:
            self.stdout.write(
                f"{line[0]:<{width[0]}}  {line[1]:>{width[1]}}  {line[2]:>{width[2]}}".rstrip()
            )
