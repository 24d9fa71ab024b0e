"""`manage.py rotate_sealed_secrets`: re-seal every stored secret with the current key."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from scheduling.services.sealed_values import reseal_stored_values


class Command(BaseCommand):
    help = (
        "Re-seal every project secret and registered cluster kubeconfig with the first key of "
        "SECRET_SEALING_KEYS. Run it after putting a new key first; then the retired keys can "
        "be removed from the list."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        outcome = reseal_stored_values()
        self.stdout.write(f"{outcome.resealed} sealed values re-sealed with the current key.")
        if outcome.unreadable:
            raise CommandError(
                "no configured key opens: " + ", ".join(outcome.unreadable) + " (left as they are)"
            )
