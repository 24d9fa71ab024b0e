"""Routes, logs and events on the real control plane: a notebook's Ingress on its own host
behind the portal's auth check, its host's /_portal/ route and its token Secret are created
with it and removed with it; a project namespace gets its NetworkPolicies; pod logs and events
are read with the least-privilege role. kwok runs no containers: the API server proxies
`pods/log` to kwok, which answers 404 "could not find the requested resource", so a log read
there is empty (a permission problem would be a 403, a pod not started yet a 400)."""

from __future__ import annotations

import base64
from dataclasses import replace
from typing import Any

import pytest

from runtime.cluster.base import WorkloadRoute
from tests.k8s.conftest import Admin, eventually
from tests.k8s.helpers import FAIL_LABEL, FAIL_PREFIX, job, project, runs_for

pytestmark = pytest.mark.k8s


def networking(admin: Admin) -> Any:
    from kubernetes import client as k8s

    return k8s.NetworkingV1Api(admin.api_client)


TOKEN = "f00dfeedf00dfeedf00dfeedf00dfeed"


def route(request_id: str) -> WorkloadRoute:
    return WorkloadRoute(
        path="/",
        host=f"{request_id}.workloads.example.org",
        auth_url=f"http://gpu-portal-web.gpu-portal.svc:8000/auth/workloads/{request_id}/",
        signin_url=f"https://gpu.example.com/connect/{request_id}/?next=$escaped_request_uri",
        ingress_class="nginx",
        portal_service_host="gpu-portal-web.gpu-portal.svc",
        portal_service_port=8000,
    )


def test_a_project_namespace_lets_in_only_the_ingress_controller(
    k8s_backend: Any, k8s_namespace: str, k8s_admin: Admin
) -> None:
    spec = replace(project(k8s_namespace), ingress_namespace="ingress-nginx")
    k8s_backend.ensure_project(spec)
    k8s_backend.ensure_project(spec)  # a repeat adopts them
    policies = {
        p.metadata.name: p
        for p in networking(k8s_admin).list_namespaced_network_policy(k8s_namespace).items
    }
    assert set(policies) == {
        "gpu-portal-default-deny",
        "gpu-portal-allow-ingress-controller",
        "gpu-portal-allow-gang",
    }
    deny = policies["gpu-portal-default-deny"].spec
    assert deny.pod_selector.match_labels is None and deny.ingress is None
    assert deny.policy_types == ["Ingress"]
    allow = policies["gpu-portal-allow-ingress-controller"].spec
    (rule,) = allow.ingress
    (peer,) = rule._from
    assert peer.namespace_selector.match_labels == {"kubernetes.io/metadata.name": "ingress-nginx"}
    assert peer.pod_selector is None  # any pod of that namespace, none of another project
    # Drift made by hand is patched back by the next ensure.
    networking(k8s_admin).patch_namespaced_network_policy(
        "gpu-portal-allow-ingress-controller",
        k8s_namespace,
        {"spec": {"ingress": [{"from": [{"namespaceSelector": {}}]}]}},
    )
    k8s_backend.ensure_project(spec)
    allowed = networking(k8s_admin).read_namespaced_network_policy(
        "gpu-portal-allow-ingress-controller", k8s_namespace
    )
    assert allowed.spec.ingress[0]._from[0].namespace_selector.match_labels == {
        "kubernetes.io/metadata.name": "ingress-nginx"
    }


def test_a_routed_notebook_gets_its_own_host_a_token_secret_and_the_auth_check(
    k8s_backend: Any, k8s_project: str, k8s_admin: Admin
) -> None:
    base = job(k8s_project, kind="notebook", max_runtime_seconds=None)
    routed = route(base.request_id)
    spec = replace(base, route=routed, notebook_token=TOKEN)
    assert k8s_backend.launch(spec) == spec.name
    assert k8s_backend.launch(spec) == spec.name  # a retry adopts what it made
    ingress = networking(k8s_admin).read_namespaced_ingress(spec.name, k8s_project)
    annotations = ingress.metadata.annotations
    assert annotations["nginx.ingress.kubernetes.io/auth-url"] == routed.auth_url
    assert annotations["nginx.ingress.kubernetes.io/auth-signin"] == routed.signin_url
    assert annotations["nginx.ingress.kubernetes.io/auth-response-headers"] == (
        "X-Auth-Request-User, Authorization"
    )
    assert ingress.metadata.labels["gpu-portal/request"] == spec.request_id
    assert ingress.spec.ingress_class_name == "nginx"
    (rule,) = ingress.spec.rules
    assert rule.host == f"{spec.request_id}.workloads.example.org"
    (path,) = rule.http.paths
    assert (path.path, path.path_type) == ("/", "Prefix")
    assert (path.backend.service.name, path.backend.service.port.number) == (spec.name, 8888)
    # The host's /_portal/ path goes to the portal, without the check.
    callback = networking(k8s_admin).read_namespaced_ingress(f"{spec.name}-portal", k8s_project)
    assert "nginx.ingress.kubernetes.io/auth-url" not in (callback.metadata.annotations or {})
    (callback_rule,) = callback.spec.rules
    assert callback_rule.host == rule.host
    assert callback_rule.http.paths[0].path == "/_portal/"
    portal = k8s_admin.core.read_namespaced_service(f"{spec.name}-portal", k8s_project)
    assert (portal.spec.type, portal.spec.external_name) == (
        "ExternalName",
        "gpu-portal-web.gpu-portal.svc",
    )
    # The token: in a Secret of its own, read by the container as JUPYTER_TOKEN.
    secret = k8s_admin.core.read_namespaced_secret(f"{spec.name}-jupyter", k8s_project)
    assert base64.b64decode(secret.data["token"]).decode() == TOKEN
    deployment = k8s_admin.apps.read_namespaced_deployment(spec.name, k8s_project)
    env = {e.name: e for e in deployment.spec.template.spec.containers[0].env}
    assert env["JUPYTER_TOKEN"].value is None
    assert env["JUPYTER_TOKEN"].value_from.secret_key_ref.name == f"{spec.name}-jupyter"
    assert "--ServerApp.token=" not in env["NOTEBOOK_ARGS"].value
    running = eventually(
        lambda: (
            (s := k8s_backend.get_workload(k8s_project, spec.request_id, 1)).phase == "running"
            and s
        ),
        what="the notebook running",
    )
    assert running.pod_names and running.pod_names[0].startswith(f"{spec.name}-")

    k8s_backend.terminate(k8s_project, spec.request_id, spec.attempt, reason="done")
    eventually(
        lambda: not networking(k8s_admin).list_namespaced_ingress(k8s_project).items,
        what="the Ingresses deleted",
    )
    secrets = k8s_admin.core.list_namespaced_secret(k8s_project).items
    assert f"{spec.name}-jupyter" not in {s.metadata.name for s in secrets}
    k8s_backend.terminate(k8s_project, spec.request_id, spec.attempt, reason="again")  # no-op


def test_events_logs_and_exit_code_are_read_with_the_portals_role(
    k8s_backend: Any, k8s_project: str, k8s_admin: Admin
) -> None:
    from kubernetes.client.exceptions import ApiException

    spec = job(
        k8s_project,
        labels={FAIL_LABEL: "true"},
        annotations={
            **runs_for("1h"),
            FAIL_PREFIX + "reason": "OOMKilled",
            FAIL_PREFIX + "message": "out of GPU memory",
            FAIL_PREFIX + "exit-code": "137",
        },
    )
    k8s_backend.launch(spec)
    failed = eventually(
        lambda: (s := k8s_backend.get_workload(k8s_project, spec.request_id, 1)).is_finished and s,
        what="the job failed",
    )
    assert failed.exit_code == 137 and failed.pod_names

    events = k8s_backend.list_events(k8s_project, spec.request_id, spec.attempt)
    seen = {(e.object_kind, e.reason) for e in events}
    assert ("Job", "SuccessfulCreate") in seen and ("Pod", "Scheduled") in seen
    scheduled = next(e for e in events if e.reason == "Scheduled")
    assert failed.node_name in scheduled.message
    assert [e.at for e in events] == sorted(e.at for e in events)
    # Another request's events are not mixed in.
    assert all(e.object_name.startswith(spec.name) for e in events)

    # The portal's role may read pods/log (no 403); kwok has no log to give.
    pod = failed.pod_names[0]
    with pytest.raises(ApiException) as refused:
        k8s_backend.core.read_namespaced_pod_log(pod, k8s_project, container="main")
    assert refused.value.status == 404
    assert "could not find the requested resource" in str(refused.value.body)
    assert list(k8s_backend.read_logs(k8s_project, spec.request_id, spec.attempt, tail=10)) == []
