"""What a launch asks of the cluster for a project's data: nothing for a request that uses
none, its claims and Secrets once (then remembered), and the pod fields that read them."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.cluster.base import ProjectDataSpec, WorkloadSpec
from runtime.cluster.simulated import SimulatedCluster
from runtime.services import execution
from runtime.services import project_data as runtime_data
from scheduling.models import Allocation
from scheduling.services.project_data import (
    create_project_secret,
    create_workspace,
    set_storage_quota,
)
from tests.scheduling.conftest import Fleet
from tests.scheduling.helpers import request_body
from tests.support.factories import api_submit
from tests.support.personas import Org

pytestmark = pytest.mark.django_db


class RecordingCluster(SimulatedCluster):
    def __init__(self) -> None:
        super().__init__(speed=100_000)
        self.data: list[ProjectDataSpec] = []
        self.launched: list[WorkloadSpec] = []

    def ensure_project_data(self, spec: ProjectDataSpec) -> None:
        self.data.append(spec)

    def launch(self, spec: WorkloadSpec) -> str:
        self.launched.append(spec)
        return super().launch(spec)


def admitted(org: Org, fleet: Fleet, **body: Any) -> Any:
    from scheduling.services import cycle

    made = api_submit(org.dev_a, request_body(org.project_a, fleet.l4_6g, **body)).json()
    cycle.run_cycle(on_admit=lambda r, a: None)
    allocation = Allocation.objects.get(request_id=made["id"])
    return allocation.request


def test_a_request_without_project_data_asks_the_cluster_for_none(org: Org, fleet: Fleet) -> None:
    cluster = RecordingCluster()
    request = admitted(org, fleet)
    execution.launch_request(request_id=request.pk, attempt=1, backend=cluster)
    assert cluster.data == []
    (spec,) = cluster.launched
    assert spec.volumes == () and spec.secret_env == () and spec.image_pull_secrets == ()


def test_a_launch_ensures_its_claims_and_secrets_once_and_mounts_them(
    org: Org, fleet: Fleet
) -> None:
    set_storage_quota(actor=org.admin, team=org.team_a, limit_gib=100)
    create_workspace(actor=org.lead_a, project=org.project_a, size_gib=20)
    create_project_secret(actor=org.lead_a, project=org.project_a, name="hf", data={"token": "t"})
    create_project_secret(actor=org.lead_a, project=org.project_a, name="other", data={"k": "v"})
    create_project_secret(
        actor=org.lead_a,
        project=org.project_a,
        name="ghcr",
        kind="registry",
        registry="ghcr.io",
        username="robot",
        password="p",
    )
    ref = {"name": "HF_TOKEN", "secret": "hf", "key": "token"}
    cluster = RecordingCluster()
    first = admitted(org, fleet, secret_env=[ref], cpu_millicores=1500, shm_mib=256)
    execution.launch_request(request_id=first.pk, attempt=1, backend=cluster)
    (data,) = cluster.data
    assert [c.name for c in data.claims] == ["workspace"]
    # Only what this request reads, and the registry logins: not the project's other secret.
    assert [(s.name, s.type) for s in data.secrets] == [
        ("gp-secret-ghcr", "kubernetes.io/dockerconfigjson"),
        ("gp-secret-hf", "Opaque"),
    ]
    (spec,) = cluster.launched
    assert [(v.claim_name, v.mount_path) for v in spec.volumes] == [("workspace", "/workspace")]
    assert [(e.name, e.secret_name, e.key) for e in spec.secret_env] == [
        ("HF_TOKEN", "gp-secret-hf", "token")
    ]
    assert spec.image_pull_secrets == ("gp-secret-ghcr",)
    assert (spec.cpu, spec.shm_mib) == ("1500m", 256)

    second = admitted(org, fleet, secret_env=[ref])
    execution.launch_request(request_id=second.pk, attempt=1, backend=cluster)
    assert len(cluster.data) == 1  # the same data, ensured a moment ago: no call


def test_the_sync_task_writes_every_claim_and_secret_of_the_project(org: Org) -> None:
    set_storage_quota(actor=org.admin, team=org.team_a, limit_gib=100)
    create_workspace(actor=org.lead_a, project=org.project_a, size_gib=20)
    create_project_secret(actor=org.lead_a, project=org.project_a, name="hf", data={"token": "t"})
    cluster = RecordingCluster()
    assert runtime_data.sync_project_data(project_id=org.project_a.pk, backend=cluster) == 2
    (data,) = cluster.data
    assert data.namespace == org.project_a.namespace
    assert dict(data.secrets[0].data) == {"token": "t"}
    assert runtime_data.sync_project_data(project_id=999_999, backend=cluster) == 0
