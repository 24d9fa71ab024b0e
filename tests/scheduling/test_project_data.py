"""Project data: storage quotas, workspaces, home volumes, secrets, and a request's CPU,
memory and /dev/shm."""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest
from django.urls import reverse

from scheduling import services
from scheduling.models import (
    GpuRequest,
    HomeVolume,
    ProjectSecret,
    ProjectWorkspace,
    StorageQuota,
)
from scheduling.sealing import unseal
from scheduling.services.project_data import (
    create_project_secret,
    create_workspace,
    set_storage_quota,
)
from tenants.models import AuditEvent
from tests.scheduling.conftest import Fleet
from tests.scheduling.helpers import request_body
from tests.support.api_contract import ApiContract, World
from tests.support.factories import api_submit
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db

TOKEN = "hf_s3cr3t-value-never-shown"


def storage_for(org: Org, limit_gib: int = 500) -> StorageQuota:
    return set_storage_quota(actor=org.admin, team=org.team_a, limit_gib=limit_gib)


def a_workspace_of_project_a(world: World) -> ProjectWorkspace:
    storage_for(world.org)
    return create_workspace(
        actor=world.org.lead_a, project=world.org.project_a, size_gib=100, home_size_gib=10
    )


def a_secret_of_project_a(world: World) -> ProjectSecret:
    return create_project_secret(
        actor=world.org.lead_a, project=world.org.project_a, name="hf", data={"token": TOKEN}
    )


STORAGE_QUOTAS = ApiContract(
    basename="storage-quota",
    subject=lambda world: storage_for(world.org),
    audit="storage_quota",
    may_read={"admin", "lead_a", "dev_a"},
    may_create={"admin"},
    may_update={"admin"},
    may_delete={"admin"},
    create_body=lambda world: {"team": world.org.team_b.pk, "limit_gib": 200},
    update_body={"limit_gib": 900},
    list_filters=lambda world: [{"team": world.org.team_a.pk}],
)
test_storage_quotas_api_contract = STORAGE_QUOTAS.tests()

WORKSPACES = ApiContract(
    basename="workspace",
    subject=a_workspace_of_project_a,
    audit="workspace",
    may_read={"admin", "lead_a", "dev_a"},
    may_create={"admin", "lead_a"},
    may_update={"admin", "lead_a"},
    may_delete={"admin", "lead_a"},
    create_body=lambda world: {"project": world.org.project_a2.pk, "size_gib": 50},
    update_body={"size_gib": 200},
    list_filters=lambda world: [{"project": world.org.project_a.pk}],
)
test_workspaces_api_contract = WORKSPACES.tests()

SECRETS = ApiContract(
    basename="project-secret",
    subject=a_secret_of_project_a,
    audit="secret",
    may_read={"admin", "lead_a", "dev_a"},
    may_create={"admin", "lead_a"},
    may_update={"admin", "lead_a"},
    may_delete={"admin", "lead_a"},
    create_body=lambda world: {
        "project": world.org.project_a.pk,
        "name": "wandb",
        "data": {"api-key": "k"},
    },
    update_body={"data": {"token": "rotated"}},
    list_filters=lambda world: [{"project": world.org.project_a.pk}, {"kind": "generic"}],
)
test_project_secrets_api_contract = SECRETS.tests()


# Secrets are write-only ---------------------------------------------------------------------


def test_a_secrets_values_are_never_returned_nor_audited_nor_stored_in_clear(
    org: Org, django_capture_on_commit_callbacks: Any
) -> None:
    client = api_client(org.lead_a)
    with (
        mock.patch("scheduling.dispatch.send") as send,
        django_capture_on_commit_callbacks(execute=True),
    ):
        with_commit = client.post(
            reverse("project-secret-list"),
            {"project": org.project_a.pk, "name": "hf", "data": {"token": TOKEN}},
            format="json",
        )
    assert with_commit.status_code == 201, with_commit.content
    body = with_commit.json()
    assert body["keys"] == ["token"] and body["kubernetes_name"] == "gp-secret-hf"
    listed = client.get(reverse("project-secret-list")).content.decode()
    detail = client.get(reverse("project-secret-detail", kwargs={"pk": body["id"]}))
    secret = ProjectSecret.objects.get()
    audit = AuditEvent.objects.filter(action__startswith="secret.")
    answers = (with_commit.content.decode(), listed, detail.content.decode())
    for text in (*answers, secret.sealed_data):
        assert TOKEN not in text
    assert all(TOKEN not in str(event.data) for event in audit)
    assert unseal(secret.sealed_data) == {"token": TOKEN}
    # Only ids go to the broker: the sync task reads the sealed values itself.
    assert [c.args for c in send.call_args_list] == [
        ("runtime.tasks.sync_project_data", org.project_a.pk)
    ]


def test_a_registry_login_keeps_registry_and_username_but_not_the_password(org: Org) -> None:
    response = api_client(org.lead_a).post(
        reverse("project-secret-list"),
        {
            "project": org.project_a.pk,
            "name": "ghcr",
            "kind": "registry",
            "registry": "ghcr.io",
            "username": "robot",
            "password": "p@ss",
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    assert response.json()["keys"] == [".dockerconfigjson"]
    assert "p@ss" not in response.content.decode()
    assert response.json()["username"] == "robot"


def test_changing_a_secret_needs_every_value_again(org: Org) -> None:
    secret = a_secret_of_project_a(World(org))
    url = reverse("project-secret-detail", kwargs={"pk": secret.pk})
    response = api_client(org.lead_a).patch(url, {"name": "hf"}, format="json")
    assert response.status_code == 400
    assert "data" in response.json()["error"]["fields"]
    response = api_client(org.lead_a).patch(url, {"data": {"token": "new"}}, format="json")
    assert response.status_code == 200 and response.json()["revision"] == 2


# Workspaces and the storage quota -----------------------------------------------------------


def test_a_workspace_over_the_teams_storage_quota_is_refused(org: Org) -> None:
    storage_for(org, limit_gib=120)
    client = api_client(org.lead_a)
    ok = client.post(
        reverse("workspace-list"), {"project": org.project_a.pk, "size_gib": 100}, format="json"
    )
    assert ok.status_code == 201, ok.content
    over = client.post(
        reverse("workspace-list"), {"project": org.project_a2.pk, "size_gib": 30}, format="json"
    )
    assert over.status_code == 400
    error = over.json()["error"]
    assert error["code"] == "storage_quota_exceeded"
    assert "120 GiB" in error["message"] and "claims 100 GiB" in error["message"]
    grow = client.patch(
        reverse("workspace-detail", kwargs={"pk": ok.json()["id"]}),
        {"size_gib": 121},
        format="json",
    )
    assert grow.status_code == 400 and grow.json()["error"]["code"] == "storage_quota_exceeded"


def test_a_team_without_a_storage_quota_gets_no_workspace(org: Org) -> None:
    response = api_client(org.lead_a).post(
        reverse("workspace-list"), {"project": org.project_a.pk, "size_gib": 1}, format="json"
    )
    assert response.status_code == 400
    assert "may claim 0 GiB" in response.json()["error"]["message"]


def test_a_workspace_cannot_shrink_nor_change_its_storage_class(org: Org) -> None:
    workspace = a_workspace_of_project_a(World(org))
    url = reverse("workspace-detail", kwargs={"pk": workspace.pk})
    client = api_client(org.lead_a)
    assert client.patch(url, {"size_gib": 50}, format="json").status_code == 400
    assert client.patch(url, {"storage_class": "fast"}, format="json").status_code == 400


# Requests -----------------------------------------------------------------------------------


def test_a_request_reads_env_from_a_project_secret_and_unknown_ones_are_refused(
    org: Org, fleet: Fleet
) -> None:
    a_secret_of_project_a(World(org))
    ref = {"name": "HF_TOKEN", "secret": "hf", "key": "token"}
    body = request_body(org.project_a, fleet.l4_6g, secret_env=[ref])
    created = api_submit(org.dev_a, body).json()
    assert created["secret_env"] == [ref]
    for bad, message in (
        ({**ref, "secret": "nope"}, "no secret named 'nope'"),
        ({**ref, "key": "other"}, "has no key 'other'"),
    ):
        response = api_submit(
            org.dev_a, request_body(org.project_a, fleet.l4_6g, secret_env=[bad]), status=400
        )
        assert message in response.json()["error"]["message"]
    # Another team's secret of the same name does not exist for team B.
    response = api_submit(
        org.dev_b, request_body(org.project_b, fleet.l4_6g, secret_env=[ref]), status=None
    )
    assert response.status_code == 400


def test_cpu_memory_and_shm_default_per_flavor_and_stop_at_the_tiers_maximum(
    org: Org, fleet: Fleet
) -> None:
    flavor = fleet.l4_6g
    flavor.default_cpu_millicores, flavor.default_memory_mib = 2000, 8192
    flavor.default_shm_mib = 1024
    flavor.save()
    tier = flavor.pool.tier
    tier.max_cpu_millicores, tier.max_memory_mib, tier.max_shm_mib = 8000, 65536, 8192
    tier.save()
    made = api_submit(org.dev_a, request_body(org.project_a, flavor)).json()
    assert (made["cpu_millicores"], made["memory_mib"], made["shm_mib"]) == (2000, 8192, 1024)
    asked = api_submit(
        org.dev_a, request_body(org.project_a, flavor, cpu_millicores=4000, memory_mib=16384)
    ).json()
    assert (asked["cpu_millicores"], asked["memory_mib"]) == (4000, 16384)
    over: dict[str, Any] = {"cpu_millicores": 8001}
    response = api_submit(org.dev_a, request_body(org.project_a, flavor, **over), status=400)
    error = response.json()["error"]
    assert error["code"] == "resource_limit_exceeded" and "cpu_millicores" in error["fields"]
    response = api_submit(
        org.dev_a, request_body(org.project_a, flavor, memory_mib=2048, shm_mib=4096), status=400
    )
    assert "shm_mib" in response.json()["error"]["fields"]


def test_a_home_volume_is_made_once_per_member_and_counted(org: Org, fleet: Fleet) -> None:
    workspace = a_workspace_of_project_a(World(org))
    body = request_body(org.project_a, fleet.l4_6g, kind="notebook", home_volume=True)
    api_submit(org.dev_a, body)
    api_submit(org.dev_a, body)
    assert HomeVolume.objects.get().size_gib == 10
    assert services.project_data.storage_used_gib(team=org.team_a) == 110
    job = request_body(org.project_a, fleet.l4_6g, kind="job", home_volume=True)
    assert api_submit(org.dev_a, job, status=400).json()["error"]["fields"]["home_volume"]
    workspace.home_size_gib = 0
    workspace.save()
    no_homes = request_body(org.project_a, fleet.l4_6g, kind="notebook", home_volume=True)
    api_submit(org.lead_a, no_homes, status=400)
    assert GpuRequest.objects.filter(home_volume=True).count() == 2
