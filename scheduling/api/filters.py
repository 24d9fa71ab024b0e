from __future__ import annotations

import django_filters

from scheduling.choices import RequestStatus
from scheduling.models import Flavor, GpuRequest, Quota
from tenants.api.filters import PortalFilterSet, StrictBooleanFilter


class GpuRequestFilter(PortalFilterSet):
    status = django_filters.MultipleChoiceFilter(choices=RequestStatus.choices)
    owner = django_filters.CharFilter(field_name="owner__username")

    class Meta:
        model = GpuRequest
        fields = ["status", "project", "team", "flavor", "kind", "priority", "owner"]


class FlavorFilter(PortalFilterSet):
    tier = django_filters.CharFilter(field_name="pool__tier__slug")
    pool = django_filters.CharFilter(field_name="pool__slug")

    class Meta:
        model = Flavor
        fields = ["kind", "gpu_model", "tier", "pool", "is_active"]


class QuotaFilter(PortalFilterSet):
    team_level = StrictBooleanFilter(field_name="project", lookup_expr="isnull")

    class Meta:
        model = Quota
        fields = ["team", "project", "flavor", "team_level"]
