"""The accounting app's data in the Django admin, read-only (see tenants.admin)."""

from __future__ import annotations

from django.contrib import admin

from accounting.models import Price, ResourcePrice
from tenants.admin import ReadOnlyAdmin


@admin.register(Price)
class PriceAdmin(ReadOnlyAdmin):
    list_display = [
        "flavor",
        "price_per_hour",
        "currency",
        "effective_from",
        "preemptible_multiplier",
        "priority_multipliers",
    ]
    list_filter = ["flavor", "currency"]


@admin.register(ResourcePrice)
class ResourcePriceAdmin(ReadOnlyAdmin):
    list_display = ["resource", "price_per_hour", "currency", "effective_from"]
    list_filter = ["resource", "currency"]
