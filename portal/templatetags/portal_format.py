"""How every page writes times, counts and codes: one format, readable units, human labels.

Registered as a template builtin (portal/settings.py), so no page needs to `{% load %}` it:

    {{ event.occurred_at|when }}      2026-12-04 17:08 UTC
    {{ request.gpu_count|gpus }}      1 GPU, 2 GPUs
    {{ flavor.gpu_equivalent|gpu_eq }}  0.43 GPU-eq, 1 GPU-eq (never "1.0000")
    {{ flavor|flavor_size }}          1 whole GPU, 0.43 GPU-eq
    {{ seconds|duration }}            90 s, 45 min, 2 h, 3 d
    {{ "team_lead"|label }}           Team lead
    {{ pool.sharing_mode|sharing_mode }}  MIG profiles
"""

from __future__ import annotations

import re
from datetime import date, datetime
from functools import cache
from typing import Any

from django import template
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from scheduling.choices import FlavorKind, SharingMode
from scheduling.engine.reserve import format_duration

register = template.Library()

TIME_FORMAT = "%Y-%m-%d %H:%M"
NOTHING = "–"


def format_when(value: datetime | date | None, *, seconds: bool = False) -> str:
    """`value` in the portal's time zone, with the zone's name: "2026-12-04 17:08 UTC"."""
    if value is None or value == "":
        return NOTHING
    if not isinstance(value, datetime):
        return value.isoformat()
    if timezone.is_aware(value):
        value = timezone.localtime(value)
    text = value.strftime(TIME_FORMAT + (":%S" if seconds else ""))
    zone = value.tzname() or timezone.get_current_timezone_name()
    return f"{text} {zone}"


@register.filter
def when(value: datetime | date | None, precision: str = "") -> SafeString | str:
    """A `<time>` element in the one format of the portal; `|when:"s"` adds the seconds."""
    if not isinstance(value, datetime):
        return format_when(value)
    return format_html(
        '<time datetime="{}">{}</time>',
        value.isoformat(),
        format_when(value, seconds=precision == "s"),
    )


@register.filter
def gpus(count: Any) -> str:
    """ "1 GPU", "2 GPUs"; fractional (vGPU) shares keep their decimals: "0.5 GPU"."""
    if count is None or count == "":
        return NOTHING
    try:
        number = float(count)
    except (TypeError, ValueError):
        return str(count)
    text = f"{number:g}"
    return f"{text} GPU" if number <= 1 else f"{text} GPUs"


def format_number(value: Any, places: int = 2) -> str:
    """A figure with at most `places` decimals and no trailing zeros: 1.0000 → "1", 0.4286 →
    "0.43"; what is not a number comes back as it is."""
    if value is None or value == "":
        return NOTHING
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    text = f"{number:.{places}f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def format_money(value: Any) -> str:
    """An amount with two decimals, more only where it has them: 2.5000 → "2.50", 0.0125 →
    "0.0125"."""
    text = format_number(value, 4)
    whole, _, cents = text.partition(".")
    return f"{whole}.{cents.ljust(2, '0')}" if text != NOTHING else text


@register.filter
def gpu_eq(value: Any) -> str:
    """GPU-equivalents (a whole card is 1), two decimals at most: "0.43 GPU-eq"."""
    if value is None or value == "":
        return NOTHING
    return f"{format_number(value)} GPU-eq"


@register.filter
def flavor_size(flavor: Any) -> str:
    """What one GPU of a flavor is: "1 whole GPU" for a whole card, else its GPU-equivalents
    ("0.5 GPU-eq"), so that a list that mixes them counts shares against whole cards."""
    if getattr(flavor, "kind", "") == FlavorKind.WHOLE:
        return "1 whole GPU"
    return gpu_eq(getattr(flavor, "gpu_equivalent", None))


@register.filter
def duration(seconds: Any) -> str:
    """A duration in seconds as "90 s", "45 min", "2 h", "1.5 h" or "3 d"."""
    if seconds is None or seconds == "":
        return NOTHING
    try:
        return format_duration(float(seconds))
    except (TypeError, ValueError):
        return str(seconds)


@register.filter
def label(code: Any) -> str:
    """A code as words: "team_lead" → "Team lead", "reclaim.idle_warning" → "Reclaim: idle
    warning". Prefer a field's `get_…_display` where there is one."""
    if code is None:
        return ""
    text = str(code)
    head, _, tail = text.partition(".")
    words = head.replace("_", " ").replace("-", " ")
    if tail:
        words = f"{words}: {tail.replace('_', ' ').replace('-', ' ')}"
    return words[:1].upper() + words[1:]


# Audit event target types with a page of their own: the page's URL name and whether it takes
# the object's id.
OBJECT_PAGES = {
    "GpuRequest": ("gpu-request-page", True),
    "Budget": ("budgets-page", False),
    "Quota": ("quotas-page", False),
}


@cache
def _settings_pages() -> dict[str, str]:
    """Target type → the fleet settings page that edits one (platform admins only)."""
    from portal.manage import SECTIONS  # the settings pages import forms and services

    return {section.model.__name__: section.edit_route for section in SECTIONS.values()}


@register.filter
def object_url(event: Any, is_platform_admin: bool = False) -> str:
    """The page of an audit event's object, or "" when it has none the viewer may open.

    Platform admins also get the fleet settings page of a tier, pool, flavor, team, project…
    """
    target_type = getattr(event, "target_type", "")
    target_id = getattr(event, "target_id", "")
    page = OBJECT_PAGES.get(target_type)
    if is_platform_admin and target_type != "GpuRequest" and target_type in _settings_pages():
        page = (_settings_pages()[target_type], True)
    if page is None:
        return ""
    name, takes_id = page
    if not takes_id:
        return reverse(name)
    try:
        return reverse(name, kwargs={"pk": int(target_id)})
    except (TypeError, ValueError, NoReverseMatch):
        return ""


# Model names that do not read as words once split at their capitals.
OBJECT_NOUNS = {"GpuRequest": "Request", "NodePool": "Pool", "RequestTemplate": "Template"}


@register.filter
def object_noun(target_type: str) -> str:
    """An audit event's object type in words: "GpuRequest" → "Request", "ApprovalRule" →
    "Approval rule"."""
    if target_type in OBJECT_NOUNS:
        return OBJECT_NOUNS[target_type]
    words = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", target_type)
    return words[:1].upper() + words[1:].lower()


@register.filter
def sharing_mode(code: str) -> str:
    """A pool's sharing mode in words: "mig" → "MIG profiles"."""
    try:
        return str(SharingMode(code).label)
    except ValueError:
        return label(code)


@register.simple_tag(takes_context=True)
def nav_link(context: Any, url_name: str, text: str) -> SafeString:
    """A nav item; the page the visitor is on is marked active and `aria-current="page"`."""
    url = reverse(url_name)
    request = context.get("request")
    current = request is not None and request.path == url
    return format_html(
        '<li class="nav-item"><a class="nav-link{}" href="{}"{}>{}</a></li>',
        " active" if current else "",
        url,
        mark_safe(' aria-current="page"') if current else "",  # noqa: S308 (a constant)
        text,
    )
