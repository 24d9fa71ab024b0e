"""A project's data on the real control plane: workspace and home claims, secrets read into
env, an image pull secret, CPU/memory//dev/shm; the request's objects go with the request
while the project's stay; a deleted secret leaves the cluster; Gateway API HTTPRoutes."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any
from unittest import mock

import pytest
from django.contrib.auth import get_user_model

from runtime.cluster.base import (
    ProjectDataSpec,
    SecretSpec,
    VolumeClaimSpec,
    WorkloadRoute,
)
from runtime.services import execution
from runtime.services import project_data as runtime_data
from runtime.services.inventory import apply_inventory
from scheduling import dispatch
from scheduling.choices import RequestStatus
from scheduling.demo import seed_demo_fleet
from scheduling.models import Flavor, StorageQuota
from scheduling.services import cycle
from scheduling.services.project_data import (
    create_project_secret,
    create_workspace,
    delete_project_secret,
)
from scheduling.services.requests import (
    GpuRequestSpec,
    approve_gpu_request,
    cancel_gpu_request,
    submit_gpu_request,
)
from tenants.models import Project
from tenants.services.organisation import seed_demo_organisation
from tests.k8s.conftest import Admin, eventually
from tests.k8s.helpers import job

pytestmark = pytest.mark.k8s

TOKEN = "hf_k8s-test-token"


def custom(admin: Admin) -> Any:
    from kubernetes import client as k8s

    return k8s.CustomObjectsApi(admin.api_client)


def networking(admin: Admin) -> Any:
    from kubernetes import client as k8s

    return k8s.NetworkingV1Api(admin.api_client)


def run_removals(send: mock.MagicMock, backend: Any) -> None:
    """What the worker's `remove_project_data` task does with the queued arguments."""
    for call in send.call_args_list:
        if call.args[0] == dispatch.REMOVE_PROJECT_DATA:
            backend.remove_project_data(*call.args[1:])


@pytest.mark.django_db
def test_a_notebook_mounts_its_projects_data_and_leaves_it_behind_when_cancelled(
    k8s_backend: Any, k8s_admin: Admin, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    settings.CLUSTER_BACKEND = "kubernetes"
    settings.PORTAL_INTERNAL_URL = "http://gpu-portal-web.gpu-portal.svc:8000"
    settings.PORTAL_URL = "https://gpu.example.com"
    settings.WORKLOAD_DOMAIN = "workloads.example.org"
    teams = seed_demo_organisation(password="x")
    seed_demo_fleet(teams=teams)
    apply_inventory(k8s_backend.sync_inventory())
    project = Project.objects.create(
        team=teams["vision"], slug=f"d{uuid.uuid4().hex[:8]}", name="Data"
    )
    ns = project.namespace
    users = get_user_model().objects
    alice, bob = users.get(username="alice"), users.get(username="bob")
    StorageQuota.objects.update_or_create(team=teams["vision"], defaults={"limit_gib": 500})
    try:
        # 1. The lead sets up the project's data; the sync task writes it to the cluster.
        create_workspace(actor=bob, project=project, size_gib=20, home_size_gib=5)
        create_project_secret(actor=bob, project=project, name="hf", data={"token": TOKEN})
        create_project_secret(
            actor=bob,
            project=project,
            name="ghcr",
            kind="registry",
            registry="ghcr.io",
            username="robot",
            password="ghcr-pass",
        )
        assert runtime_data.sync_project_data(project_id=project.pk, backend=k8s_backend) == 3

        # 2. A notebook reading the token, with a home volume and host resources.
        request = submit_gpu_request(
            actor=alice,
            spec=GpuRequestSpec(
                project=project,
                flavor=Flavor.objects.get(slug="l4-12g"),
                gpu_count=1,
                kind="notebook",
                image="ghcr.io/example/notebook:1.0",
                max_runtime_seconds=3600,
                cpu_millicores=2000,
                memory_mib=8192,
                shm_mib=1024,
                home_volume=True,
                secret_env=[{"name": "HF_TOKEN", "secret": "hf", "key": "token"}],
            ),
        )
        if request.status == RequestStatus.PENDING_APPROVAL:
            approve_gpu_request(actor=bob, request=request)
        with django_capture_on_commit_callbacks(execute=True):
            cycle.run_cycle(on_admit=lambda r, a: None)
        name = execution.launch_request(request_id=request.pk, attempt=1, backend=k8s_backend)

        # 3. What the API server holds.
        core = k8s_admin.core
        claims = {
            c.metadata.name: c for c in core.list_namespaced_persistent_volume_claim(ns).items
        }
        home = f"home-{alice.pk}"
        assert set(claims) == {"workspace", home}
        assert claims["workspace"].spec.resources.requests["storage"] == "20Gi"
        assert claims["workspace"].spec.access_modes == ["ReadWriteMany"]
        assert claims[home].spec.resources.requests["storage"] == "5Gi"
        secret = core.read_namespaced_secret("gp-secret-hf", ns)
        assert base64.b64decode(secret.data["token"]).decode() == TOKEN
        pull = core.read_namespaced_secret("gp-secret-ghcr", ns)
        assert pull.type == "kubernetes.io/dockerconfigjson"
        config = json.loads(base64.b64decode(pull.data[".dockerconfigjson"]))
        assert config["auths"]["ghcr.io"]["username"] == "robot"

        pod = k8s_admin.apps.read_namespaced_deployment(name, ns).spec.template.spec
        main = pod.containers[0]
        mounts = {m.mount_path: m.name for m in main.volume_mounts}
        volumes = {v.name: v for v in pod.volumes}
        assert volumes[mounts["/workspace"]].persistent_volume_claim.claim_name == "workspace"
        assert volumes[mounts["/home/jovyan"]].persistent_volume_claim.claim_name == home
        shm = volumes[mounts["/dev/shm"]].empty_dir
        assert (shm.medium, shm.size_limit) == ("Memory", "1Gi")
        (token,) = [e for e in main.env if e.name == "HF_TOKEN"]
        assert token.value is None
        assert (token.value_from.secret_key_ref.name, token.value_from.secret_key_ref.key) == (
            "gp-secret-hf",
            "token",
        )
        assert [s.name for s in pod.image_pull_secrets] == ["gp-secret-ghcr"]
        assert main.resources.requests == {"cpu": "2", "memory": "8Gi"}
        assert main.resources.limits["cpu"] == "2" and main.resources.limits["memory"] == "8Gi"
        assert core.read_namespaced_service(name, ns).spec.ports[0].port == 8888
        assert networking(k8s_admin).read_namespaced_ingress(name, ns).metadata.name == name

        # 4. Cancelled: the request's objects go, the project's claims and Secrets stay.
        request.refresh_from_db()  # launching now (its pod waits for its claims to bind)
        cancel_gpu_request(actor=alice, request=request)
        execution.terminate_request_workload(
            request_id=request.pk, attempt=1, reason="cancelled", backend=k8s_backend
        )
        eventually(
            lambda: (
                not k8s_admin.apps.list_namespaced_deployment(ns).items
                and not core.list_namespaced_service(ns).items
                and not networking(k8s_admin).list_namespaced_ingress(ns).items
                and not k8s_admin.batch.list_namespaced_job(ns).items
            ),
            what="the request's Deployment, Service and Ingress deleted",
        )
        left = {c.metadata.name for c in core.list_namespaced_persistent_volume_claim(ns).items}
        assert left == {"workspace", home}
        assert {"gp-secret-hf", "gp-secret-ghcr"} <= {
            s.metadata.name for s in core.list_namespaced_secret(ns).items
        }

        # 5. The lead deletes the token: the cluster's Secret goes with it.
        from scheduling.models import ProjectSecret

        with (
            mock.patch("scheduling.dispatch.send") as send,
            django_capture_on_commit_callbacks(execute=True),
        ):
            delete_project_secret(
                actor=bob, secret=ProjectSecret.objects.get(project=project, name="hf")
            )
        run_removals(send, k8s_backend)
        names = {s.metadata.name for s in core.list_namespaced_secret(ns).items}
        assert "gp-secret-hf" not in names and "gp-secret-ghcr" in names
    finally:
        k8s_admin.core.delete_namespace(ns, _preload_content=False)


def test_secrets_follow_their_revision_claims_wait_to_grow_and_foreign_objects_stay(
    k8s_backend: Any, k8s_project: str, k8s_admin: Admin
) -> None:
    from runtime.cluster.base import PermanentClusterError

    base = ProjectDataSpec(team_slug="vision", project_slug="detection", namespace=k8s_project)
    spec = replace(
        base,
        claims=(VolumeClaimSpec(name="workspace", size_gib=10),),
        secrets=(SecretSpec(name="gp-secret-hf", revision=1, data={"token": "one"}),),
    )
    k8s_backend.ensure_project_data(spec)
    k8s_backend.ensure_project_data(spec)  # a repeat changes nothing
    grown = replace(
        spec,
        claims=(VolumeClaimSpec(name="workspace", size_gib=30),),
        secrets=(SecretSpec(name="gp-secret-hf", revision=2, data={"token": "two"}),),
    )
    core = k8s_admin.core
    # No provisioner on the test bed: the claim stays Pending, and only a bound claim may grow
    # (the API refuses it), so the size waits for a sync after binding; the Secret moves on.
    k8s_backend.ensure_project_data(grown)
    claim = core.read_namespaced_persistent_volume_claim("workspace", k8s_project)
    assert claim.status.phase == "Pending"
    assert claim.spec.resources.requests["storage"] == "10Gi"
    secret = core.read_namespaced_secret("gp-secret-hf", k8s_project)
    assert base64.b64decode(secret.data["token"]) == b"two"
    assert secret.metadata.annotations["gpu-portal/revision"] == "2"

    core.create_namespaced_secret(
        k8s_project, {"metadata": {"name": "gp-secret-theirs"}, "stringData": {"a": "b"}}
    )
    theirs = replace(base, secrets=(SecretSpec(name="gp-secret-theirs", revision=1),))
    with pytest.raises(PermanentClusterError, match="not managed by the portal"):
        k8s_backend.ensure_project_data(theirs)

    k8s_backend.remove_project_data(k8s_project, "Secret", ["gp-secret-hf", "gp-secret-hf"])
    assert "gp-secret-hf" not in {
        s.metadata.name for s in core.list_namespaced_secret(k8s_project).items
    }


@pytest.fixture(scope="session")
def gateway_api(k8s_testbed: Any) -> Iterator[None]:
    """The Gateway API standard CRDs (from the Go module cache), installed once."""
    from scripts.testbed.gateway_api import install_crds

    install_crds(k8s_testbed)
    yield


def test_a_routed_notebook_gets_an_httproute_removed_with_it(
    k8s_backend: Any, k8s_project: str, k8s_admin: Admin, gateway_api: None
) -> None:
    base = job(k8s_project, kind="notebook", max_runtime_seconds=None)
    route = WorkloadRoute(
        path=f"/w/{base.request_id}/",
        host="gpu.example.com",
        auth_url=f"http://gpu-portal-web.gpu-portal.svc:8000/auth/workloads/{base.request_id}/",
        signin_url="$scheme://$host/login/?next=$escaped_request_uri",
        kind="httproute",
        gateway_name="gpu-portal",
        gateway_namespace="gpu-portal",
    )
    spec = replace(base, route=route)
    assert k8s_backend.launch(spec) == spec.name
    assert k8s_backend.launch(spec) == spec.name  # a retry adopts the route it made
    api = custom(k8s_admin)
    args = ("gateway.networking.k8s.io", "v1", k8s_project, "httproutes")
    made = api.get_namespaced_custom_object(*args, spec.name)
    assert made["spec"]["parentRefs"][0]["name"] == "gpu-portal"
    assert made["spec"]["rules"][0]["backendRefs"] == [
        {"group": "", "kind": "Service", "name": spec.name, "port": 8888, "weight": 1}
    ]
    assert made["metadata"]["labels"]["gpu-portal/request"] == spec.request_id
    assert not networking(k8s_admin).list_namespaced_ingress(k8s_project).items

    k8s_backend.terminate(k8s_project, spec.request_id, spec.attempt, reason="done")
    eventually(
        lambda: not api.list_namespaced_custom_object(*args)["items"],
        what="the HTTPRoute deleted",
    )
