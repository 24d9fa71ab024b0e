"""The project data page (a lead's workspace and secrets), the request form's data fields,
and the storage quotas on the fleet settings pages."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from scheduling.models import GpuRequest, ProjectSecret, ProjectWorkspace, StorageQuota
from scheduling.services.project_data import (
    create_project_secret,
    create_workspace,
    set_storage_quota,
)
from tests.scheduling.conftest import Fleet
from tests.support.cross_tenant import covers
from tests.support.personas import Org

pytestmark = pytest.mark.django_db

VALUE = "s3cr3t-page-value"


def client_of(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@covers("project-data-page")
def test_a_lead_sets_up_the_workspace_and_secrets_and_no_value_is_shown(org: Org) -> None:
    set_storage_quota(actor=org.admin, team=org.team_a, limit_gib=100)
    lead = client_of(org.lead_a)
    url = reverse("project-data-page", args=[org.project_a.pk])
    assert lead.get(url).status_code == 200
    lead.post(url, {"action": "workspace", "size_gib": 40, "home_size_gib": 5})
    lead.post(url, {"action": "secret", "name": "hf", "values": f"token={VALUE}\nuser=me"})
    registry = {"registry": "ghcr.io", "username": "robot", "password": VALUE}
    lead.post(url, {"action": "registry", "name": "ghcr", **registry})
    assert ProjectWorkspace.objects.get(project=org.project_a).size_gib == 40
    assert set(ProjectSecret.objects.values_list("name", flat=True)) == {"hf", "ghcr"}
    page = lead.get(url).content.decode()
    assert "40 GiB" in page and "token, user" in page and "gp-secret-ghcr" in page
    assert VALUE not in page

    over = lead.post(url, {"action": "workspace", "size_gib": 101, "home_size_gib": 5})
    assert over.status_code == 400 and "storage quota" in over.content.decode()

    # A developer of the team reads names, changes nothing.
    dev = client_of(org.dev_a)
    seen = dev.get(url).content.decode()
    assert "hf" in seen and "Store secret" not in seen
    hf = ProjectSecret.objects.get(name="hf")
    refused = dev.post(url, {"action": "delete-secret", "secret": hf.pk})
    assert refused.status_code == 403 and ProjectSecret.objects.filter(pk=hf.pk).exists()

    # Another team's lead: the project does not exist for them.
    other = client_of(org.lead_b)
    assert other.get(url).status_code == 404
    assert other.post(url, {"action": "delete-secret", "secret": hf.pk}).status_code == 404
    assert ProjectSecret.objects.filter(pk=hf.pk).exists()
    # Finance sees the project but none of its data.
    assert "gp-secret-hf" not in client_of(org.finance).get(url).content.decode()

    lead.post(url, {"action": "delete-secret", "secret": hf.pk})
    assert not ProjectSecret.objects.filter(pk=hf.pk).exists()


def test_the_request_form_takes_resources_home_volume_and_secret_env(
    org: Org, fleet: Fleet
) -> None:
    set_storage_quota(actor=org.admin, team=org.team_a, limit_gib=100)
    create_workspace(actor=org.lead_a, project=org.project_a, size_gib=10, home_size_gib=5)
    create_project_secret(actor=org.lead_a, project=org.project_a, name="hf", data={"token": VALUE})
    form = {
        "name": "notebook",
        "project": org.project_a.pk,
        "flavor": fleet.l4_6g.pk,
        "gpu_count": 1,
        "kind": "notebook",
        "image": "registry.example.com/ml/notebook:2.4",
        "max_runtime_hours": "2",
        "priority": "normal",
        "allow_shared_node": "on",
        "cpu_millicores": 1500,
        "memory_mib": 4096,
        "shm_mib": 512,
        "home_volume": "on",
        "secret_env": "HF_TOKEN=hf/token",
    }
    response = client_of(org.dev_a).post(reverse("gpu-request-new"), form)
    assert response.status_code == 302, response.content.decode()[-1500:]
    request = GpuRequest.objects.get()
    assert (request.cpu_millicores, request.memory_mib, request.shm_mib) == (1500, 4096, 512)
    assert request.home_volume
    assert request.secret_env == [{"name": "HF_TOKEN", "secret": "hf", "key": "token"}]
    bad = client_of(org.dev_a).post(reverse("gpu-request-new"), {**form, "secret_env": "X=nope"})
    assert "is not NAME=secret/key" in bad.content.decode()
    assert GpuRequest.objects.count() == 1


def test_an_admin_sets_a_teams_storage_quota_on_the_fleet_settings_pages(org: Org) -> None:
    admin = client_of(org.admin)
    response = admin.post(
        reverse("manage-storage-quotas"), {"team": org.team_a.pk, "limit_gib": 250}
    )
    assert response.status_code == 302
    quota = StorageQuota.objects.get(team=org.team_a)
    edit = reverse("manage-storage-quotas-edit", kwargs={"pk": quota.pk})
    assert admin.post(edit, {"team": org.team_a.pk, "limit_gib": 300}).status_code == 302
    quota.refresh_from_db()
    assert quota.limit_gib == 300
    assert client_of(org.lead_a).get(edit).status_code == 404
    assert client_of(org.lead_b).get(edit).status_code == 404
