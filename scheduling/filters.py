"""The requests page's filters: who, which project, which name, which state, when."""

from __future__ import annotations

from typing import Any

import django_filters
from django import forms
from django.contrib.auth import get_user_model
from django.db.models import Q, QuerySet
from django.http import HttpRequest

from scheduling.choices import RequestStatus
from scheduling.models import GpuRequest
from tenants.models import Project, Team, scope_of


def _projects(request: HttpRequest | None) -> QuerySet[Project]:
    if request is None:
        return Project.objects.none()
    visible = GpuRequest.objects.visible_to(request.user).values("project_id")
    return Project.objects.filter(pk__in=visible).order_by("name")


def _owners(request: HttpRequest | None) -> QuerySet[Any]:
    if request is None:
        return get_user_model().objects.none()
    visible = GpuRequest.objects.visible_to(request.user).values("owner_id")
    return get_user_model().objects.filter(pk__in=visible).order_by("username")


class RequestListFilter(django_filters.FilterSet):
    """Everything a lead or an admin narrows a long list by; a developer's own list takes the
    same filters but the owner (it is always them)."""

    q = django_filters.CharFilter(
        method="search", label="Search", widget=forms.TextInput(attrs={"type": "search"})
    )
    status = django_filters.ChoiceFilter(choices=RequestStatus.choices, empty_label="All states")
    owner = django_filters.ModelChoiceFilter(
        queryset=_owners, to_field_name="username", empty_label="Anyone"
    )
    project = django_filters.ModelChoiceFilter(queryset=_projects, empty_label="All projects")
    created = django_filters.DateFromToRangeFilter(
        field_name="created_at__date",
        label="Created",
        widget=django_filters.widgets.DateRangeWidget(attrs={"type": "date"}),
    )

    class Meta:
        model = GpuRequest
        fields = ["q", "status", "owner", "project", "created"]

    def __init__(self, *args: Any, request: HttpRequest, **kwargs: Any) -> None:
        super().__init__(*args, request=request, **kwargs)
        scope = scope_of(request.user)
        if not scope.is_platform_admin and not scope.lead_team_ids:
            del self.filters["owner"]
        dates = self.form.fields["created"].widget
        dates.widgets[0].attrs["aria-label"] = "Created from"
        dates.widgets[1].attrs["aria-label"] = "Created until"
        for field in self.form.fields.values():
            chooses = isinstance(field.widget, forms.Select)
            field.widget.attrs["class"] = "form-select" if chooses else "form-control"

    def search(self, queryset: QuerySet[GpuRequest], name: str, value: str) -> QuerySet[Any]:
        return search_requests(queryset, value)


def search_requests(queryset: QuerySet[GpuRequest], value: str) -> QuerySet[GpuRequest]:
    """A request's number ("12" or "#12"), or words of its name or image; the page's search and
    the API's `search` filter mean the same."""
    words = value.strip()
    if words.lstrip("#").isdigit():
        return queryset.filter(pk=int(words.lstrip("#")))
    return queryset.filter(Q(name__icontains=words) | Q(image__icontains=words))


def list_title(user: Any) -> str:
    """What the requests page lists, in words: it is not always "my" requests."""
    scope = scope_of(user)
    if scope.is_platform_admin:
        return "All requests"
    if scope.lead_team_ids:
        teams = list(
            Team.objects.filter(pk__in=scope.lead_team_ids)
            .order_by("name")
            .values_list("name", flat=True)
        )
        if len(teams) == 1:
            return f"Team {teams[0]}'s requests"
        return f"Requests of the teams {', '.join(teams)}"
    return "My requests"
