"""Routes to notebooks and services (Ingress behind the portal's auth), logs and exit codes."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client as k8s

from runtime.cluster.base import WorkloadRoute
from runtime.cluster.kubernetes_logs import _log_line
from runtime.cluster.kubernetes_manifests import ingress_manifest, workload_manifests
from runtime.cluster.kubernetes_status import pod_exit_code
from runtime.cluster.pod_manifests import route_env
from tests.cluster.specs import workload

ROUTE = WorkloadRoute(
    path="/w/812/",
    host="gpu.example.com",
    auth_url="http://portal.gpu-portal.svc:8000/auth/workloads/812/",
    signin_url="$scheme://$host/login/?next=$escaped_request_uri",
    ingress_class="nginx",
    tls_secret="gpu-example-tls",
)


def env_of(manifest: dict[str, Any]) -> dict[str, str]:
    container = manifest["spec"]["template"]["spec"]["containers"][0]
    return {item["name"]: item["value"] for item in container.get("env", [])}


def test_a_routed_notebook_gets_an_ingress_behind_the_portals_auth_check() -> None:
    spec = workload("notebook", route=ROUTE, env={"NB_PREFIX": "/mine", "A": "1"})
    deployment, service, ingress = workload_manifests(spec)
    assert [deployment["kind"], service["kind"], ingress["kind"]] == [
        "Deployment",
        "Service",
        "Ingress",
    ]
    assert ingress["apiVersion"] == "networking.k8s.io/v1"
    annotations = ingress["metadata"]["annotations"]
    assert annotations["nginx.ingress.kubernetes.io/auth-url"] == ROUTE.auth_url
    assert annotations["nginx.ingress.kubernetes.io/auth-signin"] == ROUTE.signin_url
    assert "nginx.ingress.kubernetes.io/rewrite-target" not in annotations
    assert ingress["metadata"]["labels"] == deployment["metadata"]["labels"]
    (rule,) = ingress["spec"]["rules"]
    assert rule["host"] == "gpu.example.com"
    (path,) = rule["http"]["paths"]
    assert (path["path"], path["pathType"]) == ("/w/812/", "Prefix")
    assert path["backend"]["service"] == {"name": "gpr-812-a1", "port": {"number": 8888}}
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["spec"]["tls"] == [
        {"hosts": ["gpu.example.com"], "secretName": "gpu-example-tls"}
    ]
    # The notebook serves under its path and has no token of its own; the portal's keys win.
    env = env_of(deployment)
    assert env["NB_PREFIX"] == "/w/812" and env["A"] == "1"
    assert env["WORKLOAD_BASE_PATH"] == "/w/812/"
    assert "--ServerApp.base_url=/w/812/" in env["NOTEBOOK_ARGS"]
    assert "--ServerApp.token= " in env["NOTEBOOK_ARGS"]


def test_a_routed_service_sees_paths_from_the_root() -> None:
    spec = workload("service", route=replace(ROUTE, strip_prefix=True, host=""))
    ingress = ingress_manifest(spec)
    annotations = ingress["metadata"]["annotations"]
    assert annotations["nginx.ingress.kubernetes.io/rewrite-target"] == "/$2"
    (rule,) = ingress["spec"]["rules"]
    assert "host" not in rule and "tls" not in ingress["spec"]
    (path,) = rule["http"]["paths"]
    assert (path["path"], path["pathType"]) == ("/w/812(/|$)(.*)", "ImplementationSpecific")
    assert path["backend"]["service"]["port"] == {"number": 8080}
    assert route_env(spec) == {"WORKLOAD_BASE_PATH": "/w/812/"}


def test_no_route_no_ingress_and_jobs_never_get_one() -> None:
    assert [m["kind"] for m in workload_manifests(workload("notebook"))] == [
        "Deployment",
        "Service",
    ]
    with pytest.raises(ValueError, match="only notebooks and services"):
        workload("job", route=ROUTE)
    with pytest.raises(ValueError, match="absolute"):
        replace(ROUTE, auth_url="/auth/workloads/812/")


def test_log_lines_with_nanosecond_timestamps_are_parsed() -> None:
    line = _log_line("gpr-812-a1-x", "2026-12-04T14:03:05.123456789Z step 50 loss 0.91")
    assert line.text == "step 50 loss 0.91"
    assert line.at == datetime(2026, 12, 4, 14, 3, 5, 123456, tzinfo=UTC)
    assert _log_line("p", "no timestamp here").text == "no timestamp here"


def test_the_main_containers_exit_code_is_read_from_its_last_termination() -> None:
    terminated = k8s.V1ContainerState(
        terminated=k8s.V1ContainerStateTerminated(exit_code=137, reason="OOMKilled")
    )
    pod = k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name="gpr-812-a1-x"),
        status=k8s.V1PodStatus(
            container_statuses=[
                k8s.V1ContainerStatus(
                    name="main",
                    image="i",
                    image_id="",
                    ready=False,
                    restart_count=1,
                    state=k8s.V1ContainerState(),
                    last_state=terminated,
                )
            ]
        ),
    )
    assert pod_exit_code(pod) == 137
    assert pod_exit_code(None) is None
