from __future__ import annotations

import django_filters
from django.db.models import QuerySet

from scheduling.choices import RequestStatus
from scheduling.filters import search_requests
from scheduling.models import Flavor, GpuRequest, Quota
from tenants.api.filters import PortalFilterSet, StrictBooleanFilter


class GpuRequestFilter(PortalFilterSet):
    """The requests page's filters, for the API: owner, project, state, dates and a search."""

    status = django_filters.MultipleChoiceFilter(choices=RequestStatus.choices)
    owner = django_filters.CharFilter(field_name="owner__username")
    search = django_filters.CharFilter(
        method="search_words",
        max_length=200,
        help_text="A request's number (12 or #12), or words of its name or image.",
    )
    created_after = django_filters.DateFilter(
        field_name="created_at__date",
        lookup_expr="gte",
        help_text="Created on or after this day (YYYY-MM-DD).",
    )
    created_before = django_filters.DateFilter(
        field_name="created_at__date",
        lookup_expr="lte",
        help_text="Created on or before this day (YYYY-MM-DD).",
    )

    class Meta:
        model = GpuRequest
        fields = [
            "status",
            "project",
            "team",
            "flavor",
            "kind",
            "priority",
            "owner",
            "search",
            "created_after",
            "created_before",
        ]

    def search_words(
        self, queryset: QuerySet[GpuRequest], name: str, value: str
    ) -> QuerySet[GpuRequest]:
        return search_requests(queryset, value)


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
