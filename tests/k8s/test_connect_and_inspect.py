"""Routes, logs and events on the real control plane: the Ingress behind the portal's auth
check is created with a notebook and removed with it; pod logs and events are read with the
least-privilege role. kwok runs no containers: the API server proxies `pods/log` to kwok, which
answers 404 "could not find the requested resource", so a log read there is empty (a
permission problem would be a 403, a pod not started yet a 400)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from runtime.cluster.base import WorkloadRoute
from tests.k8s.conftest import Admin, eventually
from tests.k8s.helpers import FAIL_LABEL, FAIL_PREFIX, job, runs_for

pytestmark = pytest.mark.k8s


def networking(admin: Admin) -> Any:
    from kubernetes import client as k8s

    return k8s.NetworkingV1Api(admin.api_client)


def route(request_id: str) -> WorkloadRoute:
    return WorkloadRoute(
        path=f"/w/{request_id}/",
        host="gpu.example.com",
        auth_url=f"http://gpu-portal-web.gpu-portal.svc:8000/auth/workloads/{request_id}/",
        signin_url="$scheme://$host/login/?next=$escaped_request_uri",
        ingress_class="nginx",
    )


def test_a_routed_notebook_gets_an_ingress_with_the_auth_check_removed_with_it(
    k8s_backend: Any, k8s_project: str, k8s_admin: Admin
) -> None:
    base = job(k8s_project, kind="notebook", max_runtime_seconds=None)
    routed = route(base.request_id)
    spec = replace(base, route=routed)
    assert k8s_backend.launch(spec) == spec.name
    assert k8s_backend.launch(spec) == spec.name  # a retry adopts the Ingress it made
    ingress = networking(k8s_admin).read_namespaced_ingress(spec.name, k8s_project)
    annotations = ingress.metadata.annotations
    assert annotations["nginx.ingress.kubernetes.io/auth-url"] == routed.auth_url
    assert annotations["nginx.ingress.kubernetes.io/auth-signin"] == routed.signin_url
    assert ingress.metadata.labels["gpu-portal/request"] == spec.request_id
    assert ingress.spec.ingress_class_name == "nginx"
    (rule,) = ingress.spec.rules
    assert rule.host == "gpu.example.com"
    (path,) = rule.http.paths
    assert (path.path, path.path_type) == (f"/w/{spec.request_id}/", "Prefix")
    assert (path.backend.service.name, path.backend.service.port.number) == (spec.name, 8888)
    deployment = k8s_admin.apps.read_namespaced_deployment(spec.name, k8s_project)
    env = {e.name: e.value for e in deployment.spec.template.spec.containers[0].env}
    assert env["NB_PREFIX"] == f"/w/{spec.request_id}"
    assert "--ServerApp.token= " in env["NOTEBOOK_ARGS"]
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
        what="the Ingress deleted",
    )
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
