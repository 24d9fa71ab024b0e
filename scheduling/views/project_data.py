"""The project data page: a lead sets up the project's workspace and stores its secrets.

Team members see what exists (sizes, secret names and keys — never a value), so they can
mount it and reference it; the writes go through `scheduling.services.project_data`, which
lets only the team's lead and platform admins make them. Another team's project is 404.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods

from scheduling.models import ProjectSecret, ProjectWorkspace, SecretKind, StorageQuota
from scheduling.services import project_data as services
from tenants.errors import DomainError
from tenants.models import Project, scope_of


class WorkspaceForm(forms.Form):
    size_gib = forms.IntegerField(min_value=1, max_value=1_000_000, label="Size (GiB)")
    storage_class = forms.CharField(
        max_length=253, required=False, help_text="Empty: the cluster's default"
    )
    home_size_gib = forms.IntegerField(
        min_value=0, max_value=100_000, initial=0, label="Home volume size (GiB, 0: none)"
    )


class SecretForm(forms.Form):
    name = forms.SlugField(max_length=40, help_text="Referenced as NAME=<this>/key")
    values = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "autocomplete": "off"}),
        label="Values",
        help_text="key=value per line; never shown again",
    )

    def clean_values(self) -> dict[str, str]:
        values: dict[str, str] = {}
        for line in self.cleaned_data["values"].splitlines():
            if not line.strip():
                continue
            key, sep, value = line.partition("=")
            if not sep:
                raise forms.ValidationError("One key=value per line.")
            values[key.strip()] = value
        return values


class RegistryForm(forms.Form):
    name = forms.SlugField(max_length=40)
    registry = forms.CharField(max_length=253, help_text="e.g. ghcr.io")
    username = forms.CharField(max_length=253)
    password = forms.CharField(
        max_length=4096, strip=False, widget=forms.PasswordInput(attrs={"autocomplete": "off"})
    )


def _styled(form: forms.Form) -> forms.Form:
    for field in form.fields.values():
        field.widget.attrs.setdefault("class", "form-control")
    return form


def _page(request: HttpRequest, project: Project, status: int = 200, **forms_: Any) -> HttpResponse:
    # Scoped like the API: members and admins see the data, finance (who sees projects) none.
    workspace = ProjectWorkspace.objects.visible_to(request.user).filter(project=project).first()
    quota = StorageQuota.objects.visible_to(request.user).filter(team=project.team_id).first()
    context = {
        "project": project,
        "workspace": workspace,
        "secrets": ProjectSecret.objects.visible_to(request.user)
        .filter(project=project)
        .order_by("name"),
        "can_write": scope_of(request.user).is_lead_of(project.team_id),
        "storage_limit_gib": quota.limit_gib if quota else 0,
        "storage_used_gib": services.storage_used_gib(team=project.team),
        "workspace_form": forms_.get("workspace_form")
        or WorkspaceForm(
            initial={
                "size_gib": workspace.size_gib,
                "storage_class": workspace.storage_class,
                "home_size_gib": workspace.home_size_gib,
            }
            if workspace
            else None
        ),
        "secret_form": _styled(forms_.get("secret_form") or SecretForm()),
        "registry_form": _styled(forms_.get("registry_form") or RegistryForm()),
        "refusal": forms_.get("refusal", ""),
    }
    return render(request, "scheduling/project_data.html", context, status=status)


def _write(request: HttpRequest, project: Project) -> tuple[str, dict[str, Any]]:
    """Carry out the posted action; ("", {}) when done, else a refusal and the bound form."""
    action = request.POST.get("action", "")
    actor = request.user
    if action == "workspace":
        form: forms.Form = WorkspaceForm(request.POST)
        if not form.is_valid():
            return "Check the workspace's fields.", {"workspace_form": form}
        workspace = ProjectWorkspace.objects.filter(project=project).first()
        if workspace is None:
            services.create_workspace(actor=actor, project=project, **form.cleaned_data)
        else:
            services.update_workspace(actor=actor, workspace=workspace, **form.cleaned_data)
        return "", {}
    if action == "delete-workspace":
        workspace = get_object_or_404(ProjectWorkspace, project=project)
        services.delete_workspace(actor=actor, workspace=workspace)
        return "", {}
    if action in ("secret", "registry"):
        form = SecretForm(request.POST) if action == "secret" else RegistryForm(request.POST)
        key = "secret_form" if action == "secret" else "registry_form"
        if not form.is_valid():
            return "Check the secret's fields.", {key: form}
        fields = dict(form.cleaned_data)
        if action == "secret":
            fields["data"] = fields.pop("values")
        kind = SecretKind.GENERIC if action == "secret" else SecretKind.REGISTRY
        services.create_project_secret(actor=actor, project=project, kind=kind, **fields)
        return "", {}
    if action == "delete-secret":
        secret = get_object_or_404(
            ProjectSecret, project=project, pk=request.POST.get("secret") or 0
        )
        services.delete_project_secret(actor=actor, secret=secret)
        return "", {}
    return "Unknown action.", {}


@login_required
@require_http_methods(["GET", "POST"])
def project_data(request: HttpRequest, pk: int) -> HttpResponse:
    """GET: the project's workspace and secrets; POST `action`: change them (the lead)."""
    project = get_object_or_404(
        Project.objects.visible_to(request.user).select_related("team"), pk=pk
    )
    if request.method == "GET":
        return _page(request, project)
    try:
        refusal, bound = _write(request, project)
    except DomainError as error:
        return _page(request, project, status=error.status_code, refusal=error.message)
    if refusal:
        return _page(request, project, status=400, refusal=refusal, **bound)
    messages.success(request, "Saved.")
    return redirect("project-data-page", pk=project.pk)
