"""`{{ gpu_request|why_it_waits }}`: the one sentence saying why a request has not started."""

from __future__ import annotations

from django import template

from scheduling.models import GpuRequest
from scheduling.services import blockers

register = template.Library()


@register.filter
def why_it_waits(gpu_request: GpuRequest) -> str:
    return blockers.why_it_waits(gpu_request)
