"""Reads of prices and costs."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.utils import timezone

from accounting.models import Price
from scheduling.models import Flavor


def price_in_force(*, flavor: Flavor, at: datetime | None = None) -> Price | None:
    """The price of the flavor at a moment (now by default), or None if it was never priced."""
    return (
        Price.objects.filter(flavor=flavor, effective_from__lte=at or timezone.now())
        .order_by("-effective_from")
        .first()
    )


def estimated_cost_per_hour(*, flavor: Flavor, gpu_count: int) -> tuple[Decimal, str] | None:
    price = price_in_force(flavor=flavor)
    if price is None:
        return None
    return price.price_per_hour * gpu_count, price.currency
