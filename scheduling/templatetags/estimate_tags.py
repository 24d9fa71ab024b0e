"""`{{ moment|clock }}` and `{{ seconds|wait_words }}`: estimated starts as people read them."""

from __future__ import annotations

from datetime import datetime

from django import template
from django.utils import timezone

register = template.Library()


@register.filter
def clock(moment: datetime | None) -> str:
    """14:20 today, "Sat 14:20" within the week, "12 Dec 14:20" beyond (local time)."""
    if moment is None:
        return ""
    local = timezone.localtime(moment)
    today = timezone.localdate()
    days = (local.date() - today).days
    if days == 0:
        return local.strftime("%H:%M")
    if 0 < days < 7:
        return local.strftime("%a %H:%M")
    return f"{local.day} {local.strftime('%b %H:%M')}"


@register.filter
def wait_words(seconds: float | None) -> str:
    """ "now" under two minutes, "in about 40 min", "in about 3 h", "in about 2 days"."""
    if seconds is None:
        return "not within the forecast"
    if seconds < 120:
        return "now"
    minutes = round(seconds / 60)
    if minutes < 90:
        return f"in about {minutes} min"
    hours = round(seconds / 3600)
    if hours < 36:
        return f"in about {hours} h"
    return f"in about {round(seconds / 86400)} days"
