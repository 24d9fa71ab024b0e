"""`manage.py seed_demo`: the demo organisation, safe to run again."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from accounting.demo import seed_demo_prices
from runtime.demo import seed_demo_zombie
from scheduling.demo import seed_demo_fleet
from tenants.services import DEMO_USERS, seed_demo_organisation


class Command(BaseCommand):
    help = "Create or refresh the demo organisation, its GPU fleet, quotas and prices."

    def handle(self, *args: Any, **options: Any) -> None:
        teams = seed_demo_organisation(password=settings.DEMO_PASSWORD)
        seed_demo_fleet(teams=teams)
        seed_demo_prices()
        if settings.CLUSTER_BACKEND == "simulated":
            seed_demo_zombie()
        names = ", ".join(username for username, *_ in DEMO_USERS)
        self.stdout.write(self.style.SUCCESS(f"Demo organisation ready: {names}"))
