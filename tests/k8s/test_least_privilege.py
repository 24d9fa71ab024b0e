"""The portal's rights on the real control plane: Secrets, claims and workloads only in the
project namespaces it prepared (its RoleBinding there), and an admission policy that keeps it
from binding its role anywhere else or claiming a namespace it did not make.

The test bed grants the `gpu-portal` user exactly deploy/helm/gpu-portal/files/rbac.yaml and
applies deploy/helm/gpu-portal/files/admission-policy.yaml, as the chart does."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from runtime.cluster.kubernetes import KubernetesClusterBackend
from scripts.testbed.cluster import PORTAL_USER, Testbed
from tests.k8s.conftest import Admin
from tests.k8s.helpers import project

pytestmark = pytest.mark.k8s

WORKLOADS_ROLE = "gpu-portal-workloads"


def secret(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "stringData": {"token": "s3cret"}}


def binding(name: str, subject: dict[str, str], role: str = WORKLOADS_ROLE) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [
            subject
            if subject["kind"] == "ServiceAccount"
            else {"apiGroup": "rbac.authorization.k8s.io", **subject}
        ],
    }


PORTAL = {"kind": "User", "name": PORTAL_USER}


@pytest.fixture
def portal_api(k8s_testbed: Testbed) -> Any:
    """Raw clients with the portal's own credentials, for calls the backend never makes."""
    return k8s_testbed.api_client(k8s_testbed.portal_kubeconfig)


@pytest.fixture
def foreign_namespace(k8s_admin: Admin) -> Iterator[str]:
    """A namespace someone else made, with a Secret in it."""
    name = f"other-{uuid.uuid4().hex[:8]}"
    k8s_admin.core.create_namespace({"metadata": {"name": name}})
    k8s_admin.core.create_namespaced_secret(name, secret("db-password"))
    yield name
    with contextlib.suppress(ApiException):
        k8s_admin.core.delete_namespace(name, _preload_content=False)


def refusal(call: Any, *args: Any, **kwargs: Any) -> tuple[int, str]:
    """The status and body of the API server's refusal of `call`."""
    with pytest.raises(ApiException) as refused:
        call(*args, **kwargs)
    return int(refused.value.status), str(refused.value.body or "")


def test_the_portal_cannot_read_a_secret_outside_its_project_namespaces(
    portal_api: Any, foreign_namespace: str
) -> None:
    core: Any = k8s.CoreV1Api(portal_api)
    assert refusal(core.read_namespaced_secret, "db-password", foreign_namespace)[0] == 403
    assert refusal(core.list_namespaced_secret, "kube-system")[0] == 403
    assert refusal(core.list_secret_for_all_namespaces)[0] == 403
    assert refusal(core.create_namespaced_secret, foreign_namespace, secret("x"))[0] == 403
    claim = {
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    assert (
        refusal(core.create_namespaced_persistent_volume_claim, foreign_namespace, claim)[0] == 403
    )
    batch: Any = k8s.BatchV1Api(portal_api)
    job = {
        "metadata": {"name": "j"},
        "spec": {
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}
            }
        },
    }
    assert refusal(batch.create_namespaced_job, foreign_namespace, job)[0] == 403


def test_the_portal_binds_itself_in_a_project_namespace_and_may_use_its_secrets_there(
    k8s_backend: Any, k8s_namespace: str, k8s_admin: Admin, portal_api: Any
) -> None:
    core: Any = k8s.CoreV1Api(portal_api)
    k8s_backend.ensure_project(project(k8s_namespace))

    rbac: Any = k8s.RbacAuthorizationV1Api(k8s_admin.api_client)
    made = rbac.read_namespaced_role_binding(WORKLOADS_ROLE, k8s_namespace)
    assert (made.role_ref.kind, made.role_ref.name) == ("ClusterRole", WORKLOADS_ROLE)
    assert [(s.kind, s.name) for s in made.subjects] == [("User", PORTAL_USER)]
    core.create_namespaced_secret(k8s_namespace, secret("hf"))
    assert core.read_namespaced_secret("hf", k8s_namespace).data["token"]
    k8s_backend.ensure_project(project(k8s_namespace))  # again: nothing to change


def test_the_portal_cannot_bind_its_role_outside_its_project_namespaces(
    portal_api: Any, foreign_namespace: str, k8s_project: str
) -> None:
    rbac: Any = k8s.RbacAuthorizationV1Api(portal_api)
    for namespace in (foreign_namespace, "kube-system", "default"):
        status, body = refusal(
            rbac.create_namespaced_role_binding, namespace, binding(WORKLOADS_ROLE, PORTAL)
        )
        assert status == 403, namespace
        assert "is not a GPU Portal project namespace" in body, namespace
    # Inside its own namespace: not to anyone else, not another role.
    someone = {"kind": "ServiceAccount", "name": "default", "namespace": k8s_project}
    status, body = refusal(
        rbac.create_namespaced_role_binding, k8s_project, binding("to-a-pod", someone)
    )
    assert status == 403 and "to itself only" in body
    status, _ = refusal(
        rbac.create_namespaced_role_binding, k8s_project, binding("more", PORTAL, role="admin")
    )
    assert status == 403


def test_the_portal_cannot_claim_a_namespace_it_did_not_make(
    portal_api: Any, foreign_namespace: str, k8s_admin: Admin
) -> None:
    core: Any = k8s.CoreV1Api(portal_api)
    claim = {"metadata": {"labels": {"app.kubernetes.io/managed-by": "gpu-portal"}}}
    status, body = refusal(core.patch_namespace, foreign_namespace, claim)
    assert status == 403 and "was not made by the portal" in body
    labels = k8s_admin.core.read_namespace(foreign_namespace).metadata.labels
    assert "app.kubernetes.io/managed-by" not in labels


def test_the_portal_cannot_make_or_loosen_a_namespace_without_pod_security(
    portal_api: Any, k8s_project: str, k8s_admin: Admin
) -> None:
    core: Any = k8s.CoreV1Api(portal_api)
    name = f"t-{uuid.uuid4().hex[:10]}"
    for labels in ({}, {"pod-security.kubernetes.io/enforce": "privileged"}):
        body = {"metadata": {"name": name, "labels": labels}}
        assert refusal(core.create_namespace, body)[0] == 403
    privileged = {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "privileged"}}}
    assert refusal(core.patch_namespace, k8s_project, privileged)[0] == 403
    labels = k8s_admin.core.read_namespace(k8s_project).metadata.labels
    assert labels["pod-security.kubernetes.io/enforce"] == "baseline"


def test_a_service_account_portal_binds_itself_by_its_username(
    k8s_testbed: Testbed, k8s_admin: Admin, k8s_namespace: str
) -> None:
    """In a cluster the worker is a ServiceAccount: a User subject with its full username
    (`system:serviceaccount:<namespace>:<name>`) grants it the role; the backend learns that
    name from the API server."""
    home = f"sa-{uuid.uuid4().hex[:8]}"
    name = "gpu-portal-worker"
    username = f"system:serviceaccount:{home}:{name}"
    rbac_admin: Any = k8s.RbacAuthorizationV1Api(k8s_admin.api_client)
    k8s_admin.core.create_namespace({"metadata": {"name": home}})
    try:
        k8s_admin.core.create_namespaced_service_account(home, {"metadata": {"name": name}})
        rbac_admin.create_cluster_role_binding(
            {
                "metadata": {"name": home},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "gpu-portal",
                },
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": home}],
            }
        )
        token = k8s_admin.core.create_namespaced_service_account_token(
            name, home, {"spec": {"expirationSeconds": 600}}
        ).status.token
        configuration = k8s.Configuration()
        configuration.host = k8s_testbed.server
        configuration.ssl_ca_cert = str(k8s_testbed.workdir / "ca.crt")
        configuration.api_key = {"authorization": f"Bearer {token}"}
        api = k8s.ApiClient(configuration)
        backend = KubernetesClusterBackend(api_client=api)

        backend.ensure_project(project(k8s_namespace))

        assert backend.portal_username() == username
        made = rbac_admin.read_namespaced_role_binding(WORKLOADS_ROLE, k8s_namespace)
        assert [(s.kind, s.name) for s in made.subjects] == [("User", username)]
        core: Any = k8s.CoreV1Api(api)
        core.create_namespaced_secret(k8s_namespace, secret("hf"))
        assert refusal(core.list_namespaced_secret, "kube-system")[0] == 403
    finally:
        with contextlib.suppress(ApiException):
            rbac_admin.delete_cluster_role_binding(home)
        k8s_admin.core.delete_namespace(home, _preload_content=False)
