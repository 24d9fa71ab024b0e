from django.contrib import admin

from accounting.models import Price


@admin.register(Price)
class PriceAdmin(admin.ModelAdmin):
    list_display = [
        "flavor",
        "price_per_hour",
        "currency",
        "effective_from",
        "preemptible_multiplier",
        "priority_multipliers",
    ]
    list_filter = ["flavor", "currency"]
