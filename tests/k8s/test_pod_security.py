"""Workload pods on the real control plane carry their security context: seccomp RuntimeDefault,
no privilege escalation, no capabilities, volumes owned by `fsGroup`, and `runAsNonRoot` for
notebooks, so that a notebook is admitted even where an administrator enforces Pod Security
`restricted`."""

from __future__ import annotations

from typing import Any

import pytest

from tests.k8s.conftest import Admin, eventually
from tests.k8s.helpers import job, runs_for

pytestmark = pytest.mark.k8s


def pod_of(admin: Admin, namespace: str, request_id: str) -> Any:
    pods = admin.core.list_namespaced_pod(
        namespace, label_selector=f"gpu-portal/request={request_id}"
    ).items
    return pods[0] if pods else None


def test_a_notebook_pod_runs_as_non_root_under_the_restricted_pod_security_level(
    k8s_backend: Any, k8s_project: str, k8s_admin: Admin
) -> None:
    # The administrator's choice: the portal keeps a level it finds.
    k8s_admin.core.patch_namespace(
        k8s_project, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}
    )
    spec = job(
        k8s_project,
        kind="notebook",
        max_runtime_seconds=None,
        fs_group=100,
        run_as_non_root=True,
    )
    k8s_backend.launch(spec)

    pod = eventually(lambda: pod_of(k8s_admin, k8s_project, spec.request_id), what="its pod")
    context = pod.spec.security_context
    assert (context.run_as_non_root, context.fs_group) == (True, 100)
    assert context.fs_group_change_policy == "OnRootMismatch"
    assert context.seccomp_profile.type == "RuntimeDefault"
    (container,) = pod.spec.containers
    assert container.security_context.allow_privilege_escalation is False
    assert container.security_context.capabilities.drop == ["ALL"]
    k8s_backend.terminate(k8s_project, spec.request_id, spec.attempt, reason="done")


def test_a_job_pod_gets_the_context_without_run_as_non_root(
    k8s_backend: Any, k8s_project: str, k8s_admin: Admin
) -> None:
    spec = job(k8s_project, annotations=runs_for("1h"), fs_group=100)
    k8s_backend.launch(spec)

    pod = eventually(lambda: pod_of(k8s_admin, k8s_project, spec.request_id), what="its pod")
    context = pod.spec.security_context
    assert (context.run_as_non_root, context.fs_group) == (None, 100)
    assert context.seccomp_profile.type == "RuntimeDefault"
    assert pod.spec.containers[0].security_context.capabilities.drop == ["ALL"]
    k8s_backend.terminate(k8s_project, spec.request_id, spec.attempt, reason="t", grace_seconds=0)
