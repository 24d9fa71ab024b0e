"""What a pod mounts and reads of its project (claims, secrets, /dev/shm), the project's
claims and Secrets, and the Gateway API route of a notebook or service."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.cluster import kubernetes_manifests as manifests
from runtime.cluster import project_manifests
from runtime.cluster.base import (
    HOME_MOUNT_PATH,
    WORKSPACE_MOUNT_PATH,
    ProjectDataSpec,
    SecretEnvVar,
    SecretSpec,
    VolumeClaimSpec,
    VolumeMount,
    WorkloadRoute,
)
from runtime.cluster.pod_manifests import notice_volume
from tests.cluster.specs import NAMESPACE, workload
from tests.cluster.test_manifests import assert_valid, container

DATA = ProjectDataSpec(team_slug="vision", project_slug="detection", namespace=NAMESPACE)
VOLUMES = (
    VolumeMount(claim_name="workspace", mount_path=WORKSPACE_MOUNT_PATH),
    VolumeMount(claim_name="home-7", mount_path=HOME_MOUNT_PATH),
)
ROUTE = WorkloadRoute(
    path="/w/812/",
    host="gpu.example.com",
    auth_url="http://portal.gpu-portal.svc:8000/auth/workloads/812/",
    signin_url="$scheme://$host/login/?next=$escaped_request_uri",
    kind="httproute",
    gateway_name="gpu-portal",
    gateway_namespace="gateways",
    gateway_section="https",
)


def data_workload(kind: str = "notebook", **changes: Any) -> Any:
    return workload(
        kind,  # type: ignore[arg-type]
        volumes=VOLUMES,
        secret_env=(SecretEnvVar(name="HF_TOKEN", secret_name="gp-secret-hf", key="token"),),
        image_pull_secrets=("gp-secret-ghcr",),
        shm_mib=2048,
        **changes,
    )


@pytest.mark.parametrize("kind", ["job", "notebook", "service"])
def test_a_pod_mounts_the_workspace_home_and_shm_and_reads_secret_env(kind: str) -> None:
    first = manifests.workload_manifests(data_workload(kind))[0]
    assert_valid(first)
    pod = first["spec"]["template"]["spec"]
    main = container(first)
    assert pod["volumes"] == [
        {"name": "data-0", "persistentVolumeClaim": {"claimName": "workspace"}},
        {"name": "data-1", "persistentVolumeClaim": {"claimName": "home-7"}},
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2048Mi"}},
        notice_volume(),
    ]
    assert main["volumeMounts"] == [
        {"name": "data-0", "mountPath": "/workspace"},
        {"name": "data-1", "mountPath": "/home/jovyan"},
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "gpu-portal-notice", "mountPath": "/etc/gpu-portal/notice", "readOnly": True},
    ]
    assert {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "gp-secret-hf", "key": "token"}},
    } in main["env"]
    assert pod["imagePullSecrets"] == [{"name": "gp-secret-ghcr"}]
    assert main["resources"]["requests"] == {"cpu": "4", "memory": "32Gi"}
    assert main["resources"]["limits"]["cpu"] == "4"
    assert main["resources"]["limits"]["memory"] == "32Gi"


def test_a_plain_env_value_wins_over_a_secret_reference_of_the_same_name() -> None:
    spec = data_workload("job", env={"HF_TOKEN": "plain"})
    env = container(manifests.job_manifest(spec))["env"]
    assert [e for e in env if e["name"] == "HF_TOKEN"] == [{"name": "HF_TOKEN", "value": "plain"}]


def test_a_pod_without_project_data_has_only_the_notice_volume_and_no_pull_secrets() -> None:
    pod = manifests.job_manifest(workload("job"))["spec"]["template"]["spec"]
    assert pod["volumes"] == [notice_volume()] and "imagePullSecrets" not in pod
    assert [m["name"] for m in pod["containers"][0]["volumeMounts"]] == ["gpu-portal-notice"]


def test_two_volumes_on_one_path_are_refused() -> None:
    with pytest.raises(ValueError, match="mount path"):
        workload("job", volumes=(VOLUMES[0], VOLUMES[0]))


def test_the_project_claim_and_secrets_are_labelled_and_valid() -> None:
    claim = project_manifests.claim_manifest(
        DATA, VolumeClaimSpec(name="workspace", size_gib=100, storage_class="cephfs")
    )
    assert_valid(claim)
    assert claim["spec"] == {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": "100Gi"}},
        "storageClassName": "cephfs",
    }
    assert claim["metadata"]["labels"]["gpu-portal/project"] == "detection"
    secret = project_manifests.secret_manifest(
        DATA, SecretSpec(name="gp-secret-hf", revision=3, data={"token": "t"})
    )
    assert_valid(secret)
    assert secret["metadata"]["annotations"] == {"gpu-portal/revision": "3"}
    assert (secret["type"], secret["stringData"]) == ("Opaque", {"token": "t"})


def test_a_secret_spec_never_prints_its_values() -> None:
    spec = SecretSpec(name="gp-secret-hf", revision=1, data={"token": "hf_top_secret"})
    assert "hf_top_secret" not in repr(spec)
    assert "hf_top_secret" not in repr(
        ProjectDataSpec("vision", "detection", NAMESPACE, (), (spec,))
    )


def test_a_routed_notebook_gets_an_httproute_on_the_gateway_instead_of_an_ingress() -> None:
    deployment, service, route = manifests.workload_manifests(workload("notebook", route=ROUTE))
    assert [deployment["kind"], service["kind"], route["kind"]] == [
        "Deployment",
        "Service",
        "HTTPRoute",
    ]
    assert route["apiVersion"] == "gateway.networking.k8s.io/v1"
    assert route["spec"]["parentRefs"] == [
        {
            "group": "gateway.networking.k8s.io",
            "kind": "Gateway",
            "name": "gpu-portal",
            "namespace": "gateways",
            "sectionName": "https",
        }
    ]
    assert route["spec"]["hostnames"] == ["gpu.example.com"]
    (rule,) = route["spec"]["rules"]
    assert rule["matches"] == [{"path": {"type": "PathPrefix", "value": "/w/812"}}]
    assert rule["backendRefs"] == [{"name": "gpr-812-a1", "port": 8888}]
    assert "filters" not in rule  # a notebook keeps its base URL
    assert route["metadata"]["annotations"]["gpu-portal/auth-url"] == ROUTE.auth_url
    assert route["metadata"]["labels"] == deployment["metadata"]["labels"]


def test_a_routed_service_has_its_prefix_replaced_by_the_route() -> None:
    from dataclasses import replace

    *_, route = manifests.workload_manifests(
        workload("service", route=replace(ROUTE, strip_prefix=True, gateway_section=""))
    )
    (rule,) = route["spec"]["rules"]
    assert rule["filters"] == [
        {
            "type": "URLRewrite",
            "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}},
        }
    ]
    assert "sectionName" not in route["spec"]["parentRefs"][0]
