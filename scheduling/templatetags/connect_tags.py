"""`{{ gpu_request|connect_url }}`: where to open a running notebook or service, or None."""

from __future__ import annotations

from django import template

from scheduling.models import GpuRequest
from scheduling.selectors.connect import connect_url as _connect_url

register = template.Library()


@register.filter
def connect_url(gpu_request: GpuRequest) -> str | None:
    return _connect_url(gpu_request)
