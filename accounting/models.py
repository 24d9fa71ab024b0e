"""Prices of flavors (usage ledger and budgets build on them)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from scheduling.models import CatalogQuerySet, Flavor


class Price(models.Model):
    """The hourly price of one unit of a flavor from `effective_from` on; never rewritten."""

    flavor = models.ForeignKey(Flavor, on_delete=models.CASCADE, related_name="prices")
    price_per_hour = models.DecimalField(max_digits=10, decimal_places=4)
    currency = models.CharField(max_length=3, default=settings.PORTAL_CURRENCY)
    effective_from = models.DateTimeField()

    objects = CatalogQuerySet.as_manager()

    class Meta:
        ordering = ["flavor__name", "-effective_from"]
        constraints = [
            models.UniqueConstraint(
                fields=["flavor", "effective_from"],
                name="price_one_per_flavor_and_start",
                violation_error_message="The flavor already has a price starting at this time.",
            ),
            models.CheckConstraint(
                condition=Q(price_per_hour__gte=0),
                name="price_not_negative",
                violation_error_message="A price cannot be negative.",
            ),
        ]

    def __str__(self) -> str:
        since = f"{self.effective_from:%Y-%m-%d}"
        return f"{self.flavor} {self.price_per_hour} {self.currency}/h from {since}"
