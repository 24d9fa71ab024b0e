"""`manage.py follow_workloads [--rounds N]`: keep following every cluster's pod watch and move
requests as their pods change (runtime/services/workload_follower.py). Runs until SIGTERM or
SIGINT, finishing the round under way; one per deployment is enough, more only repeat reads."""

from __future__ import annotations

import signal
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from runtime.services.workload_follower import follow


class Command(BaseCommand):
    help = "Follow the clusters' pod watches and move requests as their pods change."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--rounds", type=int, default=0, help="stop after N rounds (default: run until stopped)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["rounds"] < 0:
            raise CommandError("--rounds must be 0 (run until stopped) or more.")
        stop = False

        def request_stop(signum: int, frame: object) -> None:
            nonlocal stop
            stop = True

        signal.signal(signal.SIGTERM, request_stop)
        signal.signal(signal.SIGINT, request_stop)
        rounds = follow(lambda: stop, max_rounds=options["rounds"])
        self.stdout.write(f"followed the clusters' workloads for {rounds} rounds")
