"""`manage.py seed_demo`: the demo organisation and its history, safe to run again.

Every demo object is made once (`tenants.demo`): a later run makes only what was never seeded
and leaves what a user changed or deleted as it is. What it cannot make it names on stderr, and
it goes on.
"""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand
from django.db import DatabaseError

from accounting.demo import seed_demo_prices
from portal.demo_history import seed_demo_history
from runtime.demo import seed_demo_zombie
from scheduling.demo import seed_demo_fleet, seed_demo_workbench
from tenants.demo import DemoSeeding
from tenants.errors import DomainError
from tenants.services.organisation import DEMO_USERS, seed_demo_organisation


class Command(BaseCommand):
    help = (
        "Create the demo organisation, its GPU fleet, quotas and prices, each object once, and "
        "write its history once (DEMO_HISTORY_DAYS days)."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--history-days",
            type=int,
            default=None,
            help="Days of history to write the first time (default DEMO_HISTORY_DAYS; 0: none).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        # 1. What was never seeded, each object once (tenants.demo); the rest is the user's.
        seeding = DemoSeeding()
        teams = seed_demo_organisation(password=settings.DEMO_PASSWORD, seeding=seeding)
        seed_demo_fleet(teams=teams, seeding=seeding)
        seed_demo_workbench(teams=teams, seeding=seeding)
        seed_demo_prices(seeding=seeding)
        if settings.CLUSTER_BACKEND == "simulated":
            seed_demo_zombie(seeding=seeding)
        seeding.finish()
        for problem in seeding.problems:
            self.stderr.write(problem)
        # 2. The history, once; a database changed before it was written may refuse it.
        days = options["history_days"]
        days = settings.DEMO_HISTORY_DAYS if days is None else days
        started = time.perf_counter()
        try:
            drawn = seed_demo_history(days=days)
        except (DatabaseError, DomainError, ValidationError, LookupError) as error:
            self.stderr.write(f"could not seed the demo history: {error!r}")
            drawn = 0
        if drawn:
            self.stdout.write(
                f"Demo history: {days} days, {drawn} requests "
                f"({time.perf_counter() - started:.1f} s)."
            )
        names = ", ".join(username for username, *_ in DEMO_USERS)
        self.stdout.write(self.style.SUCCESS(f"Demo organisation ready: {names}"))
