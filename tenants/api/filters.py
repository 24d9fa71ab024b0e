from __future__ import annotations

import django_filters

from tenants.models import AuditEvent, Membership, Project


class ProjectFilter(django_filters.FilterSet):
    class Meta:
        model = Project
        fields = ["team", "slug"]


class MembershipFilter(django_filters.FilterSet):
    user = django_filters.CharFilter(field_name="user__username")

    class Meta:
        model = Membership
        fields = ["team", "role", "user"]


class AuditEventFilter(django_filters.FilterSet):
    actor = django_filters.CharFilter(field_name="actor__username")
    since = django_filters.IsoDateTimeFilter(field_name="occurred_at", lookup_expr="gte")
    action = django_filters.CharFilter(lookup_expr="startswith")

    class Meta:
        model = AuditEvent
        fields = ["action", "target_type", "target_id", "team", "project", "actor", "since"]
