"""`manage.py seed_demo`: the demo organisation, safe to run again."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from tenants.services import DEMO_USERS, seed_demo_organisation


class Command(BaseCommand):
    help = "Create or refresh the demo organisation (teams, projects, users for every role)."

    def handle(self, *args: Any, **options: Any) -> None:
        seed_demo_organisation(password=settings.DEMO_PASSWORD)
        names = ", ".join(username for username, *_ in DEMO_USERS)
        self.stdout.write(self.style.SUCCESS(f"Demo organisation ready: {names}"))
