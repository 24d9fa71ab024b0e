"""Demo prices per flavor-hour."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from django.conf import settings

from accounting.models import Price
from scheduling.models import Flavor

PRICES = {
    "a100-80g": "2.50",
    "h100-1g10gb": "0.60",
    "h100-3g40gb": "1.80",
    "l4-12g": "0.40",
    "l4-6g": "0.25",
}
PRICED_FROM = datetime(2026, 1, 1, tzinfo=UTC)


def seed_demo_prices() -> None:
    for flavor in Flavor.objects.filter(slug__in=PRICES):
        Price.objects.get_or_create(
            flavor=flavor,
            effective_from=PRICED_FROM,
            defaults={
                "price_per_hour": Decimal(PRICES[flavor.slug]),
                "currency": settings.PORTAL_CURRENCY,
            },
        )
