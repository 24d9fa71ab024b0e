from __future__ import annotations

import django_filters

from tenants.models import Membership, Project


class ProjectFilter(django_filters.FilterSet):
    class Meta:
        model = Project
        fields = ["team", "slug"]


class MembershipFilter(django_filters.FilterSet):
    user = django_filters.CharFilter(field_name="user__username")

    class Meta:
        model = Membership
        fields = ["team", "role", "user"]
