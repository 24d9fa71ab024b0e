"""A workload on its own host: the Ingress by host, the host's /_portal/ route to the portal,
the notebook's token in a Secret of its own, and the project's NetworkPolicies."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import kubernetes_validate
import pytest

from runtime.cluster import kubernetes_manifests as manifests
from runtime.cluster import project_manifests
from runtime.cluster.base import WorkloadRoute
from tests.cluster.specs import NAMESPACE, project, workload

TOKEN = "0123456789abcdef0123456789abcdef"
ROUTE = WorkloadRoute(
    path="/",
    host="812.workloads.example.org",
    auth_url="http://gpu-portal-web.gpu-portal.svc:8000/auth/workloads/812/",
    signin_url="https://gpu.example.com/connect/812/?next=$escaped_request_uri",
    ingress_class="nginx",
    portal_service_host="gpu-portal-web.gpu-portal.svc",
    portal_service_port=8000,
)
AUTH_URL = "nginx.ingress.kubernetes.io/auth-url"
RESPONSE_HEADERS = "nginx.ingress.kubernetes.io/auth-response-headers"


def valid(manifest: dict[str, Any]) -> dict[str, Any]:
    kubernetes_validate.validate(manifest, "1.33.0", strict=True)
    return manifest


def by_kind_and_name(spec: Any) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (m["kind"], m["metadata"]["name"]): valid(m) for m in manifests.workload_manifests(spec)
    }


def test_a_notebook_gets_its_token_from_a_secret_and_the_ingress_passes_it_on() -> None:
    spec = workload("notebook", route=ROUTE, notebook_token=TOKEN, max_runtime_seconds=None)
    objects = by_kind_and_name(spec)
    secret = objects[("Secret", f"{spec.name}-jupyter")]
    assert secret["stringData"] == {"token": TOKEN}
    deployment = objects[("Deployment", spec.name)]
    assert TOKEN not in json.dumps(deployment)  # never a literal in the Deployment
    env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    (token_env,) = [e for e in env if e["name"] == "JUPYTER_TOKEN"]
    assert token_env["valueFrom"]["secretKeyRef"] == {
        "name": f"{spec.name}-jupyter",
        "key": "token",
    }
    args = next(e["value"] for e in env if e["name"] == "NOTEBOOK_ARGS")
    assert "--ServerApp.token=" not in args and "--ServerApp.base_url=/ " in args
    assert TOKEN not in repr(spec)
    ingress = objects[("Ingress", spec.name)]
    assert ingress["metadata"]["annotations"][RESPONSE_HEADERS] == (
        "X-Auth-Request-User, Authorization"
    )
    (rule,) = ingress["spec"]["rules"]
    assert rule["host"] == "812.workloads.example.org"
    assert [p["path"] for p in rule["http"]["paths"]] == ["/"]


def test_the_workload_host_sends_its_portal_path_to_the_portal_without_the_check() -> None:
    spec = workload("service", route=ROUTE)
    objects = by_kind_and_name(spec)
    service = objects[("Service", f"{spec.name}-portal")]
    assert service["spec"]["type"] == "ExternalName"
    assert service["spec"]["externalName"] == "gpu-portal-web.gpu-portal.svc"
    portal = objects[("Ingress", f"{spec.name}-portal")]
    assert AUTH_URL not in portal["metadata"].get("annotations", {})
    (rule,) = portal["spec"]["rules"]
    assert rule["host"] == "812.workloads.example.org"
    (path,) = rule["http"]["paths"]
    assert path["path"] == "/_portal/"
    assert path["backend"]["service"] == {"name": f"{spec.name}-portal", "port": {"number": 8000}}
    ingress = objects[("Ingress", spec.name)]
    assert ingress["metadata"]["annotations"][AUTH_URL] == ROUTE.auth_url
    # A service keeps its own Authorization header: only the user's name is passed on.
    assert ingress["metadata"]["annotations"][RESPONSE_HEADERS] == "X-Auth-Request-User"


def test_with_gateway_api_the_portal_path_is_a_route_of_its_own() -> None:
    route = replace(ROUTE, kind="httproute", gateway_name="gpu-portal", gateway_namespace="gw")
    spec = workload("service", route=route)
    objects = manifests.workload_manifests(spec)
    routes = {m["metadata"]["name"]: m for m in objects if m["kind"] == "HTTPRoute"}
    portal = routes[f"{spec.name}-portal"]
    assert "gpu-portal/auth-url" not in portal["metadata"]["annotations"]
    assert "gpu-portal/auth-url" in routes[spec.name]["metadata"]["annotations"]
    assert portal["spec"]["hostnames"] == ["812.workloads.example.org"]
    (rule,) = portal["spec"]["rules"]
    assert rule["matches"][0]["path"]["value"] == "/_portal"
    assert rule["backendRefs"] == [{"name": f"{spec.name}-portal", "port": 8000}]


def test_only_a_notebook_has_a_token() -> None:
    with pytest.raises(ValueError, match="only a notebook"):
        workload("service", route=ROUTE, notebook_token=TOKEN)
    with pytest.raises(ValueError, match="own host"):
        replace(ROUTE, host="")


def test_a_project_denies_all_ingress_but_the_controllers_and_a_gangs_own() -> None:
    policies = {
        p["metadata"]["name"]: valid(p)
        for p in project_manifests.network_policy_manifests(
            project(ingress_namespace="ingress-nginx")
        )
    }
    deny = policies["gpu-portal-default-deny"]
    assert deny["metadata"]["namespace"] == NAMESPACE
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress"]}
    allow = policies["gpu-portal-allow-ingress-controller"]["spec"]
    assert allow["podSelector"] == {"matchLabels": {"app.kubernetes.io/managed-by": "gpu-portal"}}
    assert allow["ingress"] == [
        {
            "from": [
                {
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}
                    }
                }
            ]
        }
    ]
    gang = policies["gpu-portal-allow-gang"]["spec"]
    ranks = {"matchExpressions": [{"key": "gpu-portal/gang-size", "operator": "Exists"}]}
    assert gang["podSelector"] == ranks and gang["ingress"] == [{"from": [{"podSelector": ranks}]}]
    # Without an ingress controller's namespace nothing outside the project gets in.
    bare = project_manifests.network_policy_manifests(project())
    assert {p["metadata"]["name"] for p in bare} == {
        "gpu-portal-default-deny",
        "gpu-portal-allow-gang",
    }
