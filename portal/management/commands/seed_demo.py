"""`manage.py seed_demo`: the demo organisation and its history, safe to run again."""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from accounting.demo import seed_demo_prices
from portal.demo_history import seed_demo_history
from runtime.demo import seed_demo_zombie
from scheduling.demo import seed_demo_fleet
from tenants.services import DEMO_USERS, seed_demo_organisation


class Command(BaseCommand):
    help = (
        "Create or refresh the demo organisation, its GPU fleet, quotas and prices, and write "
        "its history once (DEMO_HISTORY_DAYS days)."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--history-days",
            type=int,
            default=None,
            help="Days of history to write the first time (default DEMO_HISTORY_DAYS; 0: none).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        teams = seed_demo_organisation(password=settings.DEMO_PASSWORD)
        seed_demo_fleet(teams=teams)
        seed_demo_prices()
        if settings.CLUSTER_BACKEND == "simulated":
            seed_demo_zombie()
        days = options["history_days"]
        days = settings.DEMO_HISTORY_DAYS if days is None else days
        started = time.perf_counter()
        drawn = seed_demo_history(days=days)
        if drawn:
            self.stdout.write(
                f"Demo history: {days} days, {drawn} requests "
                f"({time.perf_counter() - started:.1f} s)."
            )
        names = ", ".join(username for username, *_ in DEMO_USERS)
        self.stdout.write(self.style.SUCCESS(f"Demo organisation ready: {names}"))
