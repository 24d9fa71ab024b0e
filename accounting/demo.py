"""Demo prices per flavor-hour, and per core-hour, GiB-hour of memory and GiB-hour of storage."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from django.conf import settings
from django.db import transaction

from accounting.choices import HostResource
from accounting.models import Price, ResourcePrice
from scheduling.models import Flavor
from tenants.demo import DemoSeeding

PRICES = {
    "a100-80g": "2.50",
    "h100-1g10gb": "0.60",
    "h100-3g40gb": "1.80",
    "l4-12g": "0.40",
    "l4-6g": "0.25",
}
PRICED_FROM = datetime(2026, 1, 1, tzinfo=UTC)
#: Modest host prices beside the GPUs: a core-hour, a GiB-hour of memory, a GiB-hour of claimed
#: storage (≈ 0.10 a GiB for a 730-hour month).
RESOURCE_PRICES = {
    HostResource.CPU: "0.03",
    HostResource.MEMORY: "0.004",
    HostResource.STORAGE: "0.000137",
}


@transaction.atomic
def seed_demo_prices(*, seeding: DemoSeeding | None = None) -> None:
    """Price the demo flavors that were never priced (`tenants.demo`): a price a user changed,
    added or deleted stays so."""
    record = seeding or DemoSeeding()
    for slug, amount in PRICES.items():
        key = f"price:{slug}@{PRICED_FROM:%Y-%m-%d}"
        flavor = record.seeded(f"flavor:{slug}", Flavor)
        if flavor is None:
            record.could_not(key, f"flavor {slug} is gone")
            continue
        record.get_or_create(
            key,
            Price,
            flavor=flavor,
            effective_from=PRICED_FROM,
            defaults={"price_per_hour": Decimal(amount), "currency": settings.PORTAL_CURRENCY},
        )
    for resource, amount in RESOURCE_PRICES.items():
        record.get_or_create(
            f"resource-price:{resource}@{PRICED_FROM:%Y-%m-%d}",
            ResourcePrice,
            resource=resource,
            effective_from=PRICED_FROM,
            defaults={"price_per_hour": Decimal(amount), "currency": settings.PORTAL_CURRENCY},
        )
    if seeding is None:
        record.finish()
