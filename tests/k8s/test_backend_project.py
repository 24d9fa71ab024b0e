"""Namespaces, ResourceQuotas, LimitRanges and PriorityClasses against the real API server:
created, re-created idempotently, converged, and enforced by real admission."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from runtime.cluster.base import LimitRangeSpec, PermanentClusterError, PrioritySpec, ProjectSpec
from runtime.services.execution import PRIORITY_CLASSES
from tests.k8s.conftest import Admin, eventually
from tests.k8s.helpers import GPU_TOLERATION, job, project

pytestmark = pytest.mark.k8s


def test_project_namespace_quota_and_priorities_are_created_and_recreated_idempotently(
    k8s_backend: Any, k8s_namespace: str, k8s_admin: Admin
) -> None:
    spec = project(
        k8s_namespace,
        **{"requests.nvidia.com/gpu": 8, "nvidia.com/mig-1g.10gb": 4, "pods": 20},
    )
    classes = list(PRIORITY_CLASSES.values())
    k8s_backend.ensure_priority_classes(classes)
    k8s_backend.ensure_project(spec)
    ns = k8s_admin.core.read_namespace(k8s_namespace)
    quota = k8s_admin.core.read_namespaced_resource_quota("gpu-portal-quota", k8s_namespace)
    versions = (ns.metadata.resource_version, quota.metadata.resource_version)
    assert ns.metadata.labels["app.kubernetes.io/managed-by"] == "gpu-portal"
    assert ns.metadata.labels["pod-security.kubernetes.io/enforce"] == "baseline"
    assert quota.spec.hard == {
        "requests.nvidia.com/gpu": "8",
        "requests.nvidia.com/mig-1g.10gb": "4",
        "pods": "20",
    }
    for spec_class in classes:
        pc = k8s_admin.scheduling.read_priority_class(spec_class.name)
        assert (pc.value, pc.preemption_policy) == (spec_class.value, spec_class.preemption_policy)

    # Twice: nothing changes.
    k8s_backend.ensure_priority_classes(classes)
    k8s_backend.ensure_project(spec)
    ns = k8s_admin.core.read_namespace(k8s_namespace)
    quota = k8s_admin.core.read_namespaced_resource_quota("gpu-portal-quota", k8s_namespace)
    assert (ns.metadata.resource_version, quota.metadata.resource_version) == versions


def test_quota_and_limit_range_drift_converges(
    k8s_backend: Any, k8s_namespace: str, k8s_admin: Admin
) -> None:
    k8s_backend.ensure_project(project(k8s_namespace))
    changed = ProjectSpec(
        team_slug="vision",
        project_slug="detection",
        namespace=k8s_namespace,
        quota={"requests.nvidia.com/gpu": 4, "requests.memory": "512Gi"},
        limit_range=LimitRangeSpec(
            default_limits={"cpu": "2", "memory": "8Gi"},
            default_requests={"cpu": "500m", "memory": "2Gi"},
        ),
    )
    k8s_backend.ensure_project(changed)
    quota = k8s_admin.core.read_namespaced_resource_quota("gpu-portal-quota", k8s_namespace)
    assert quota.spec.hard == {"requests.nvidia.com/gpu": "4", "requests.memory": "512Gi"}
    limits = k8s_admin.core.read_namespaced_limit_range("gpu-portal-limits", k8s_namespace)
    assert limits.spec.limits[0].default == {"cpu": "2", "memory": "8Gi"}
    version = limits.metadata.resource_version
    k8s_backend.ensure_project(changed)  # the server's canonical quantities compare equal
    limits = k8s_admin.core.read_namespaced_limit_range("gpu-portal-limits", k8s_namespace)
    assert limits.metadata.resource_version == version
    k8s_backend.ensure_project(project(k8s_namespace))  # no defaults: the LimitRange goes
    with pytest.raises(ApiException) as gone:
        k8s_admin.core.read_namespaced_limit_range("gpu-portal-limits", k8s_namespace)
    assert gone.value.status == 404


def test_a_namespace_an_administrator_hands_over_is_adopted(
    k8s_backend: Any, k8s_namespace: str, k8s_admin: Admin
) -> None:
    k8s_admin.core.create_namespace(
        {
            "metadata": {
                "name": k8s_namespace,
                "labels": {
                    "pod-security.kubernetes.io/enforce": "restricted",
                    "app.kubernetes.io/managed-by": "gpu-portal",  # the hand-over
                },
            }
        }
    )
    k8s_backend.ensure_project(project(k8s_namespace))
    labels = k8s_admin.core.read_namespace(k8s_namespace).metadata.labels
    assert labels["gpu-portal/project"] == "detection"
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"  # the admin's choice


def test_a_namespace_not_handed_over_is_refused_and_left_as_it_was(
    k8s_backend: Any, k8s_namespace: str, k8s_admin: Admin
) -> None:
    k8s_admin.core.create_namespace({"metadata": {"name": k8s_namespace, "labels": {"a": "b"}}})
    with pytest.raises(PermanentClusterError, match="managed-by=gpu-portal") as refused:
        k8s_backend.ensure_project(project(k8s_namespace))
    assert refused.value.status == 403
    assert k8s_admin.core.read_namespace(k8s_namespace).metadata.labels == {
        "a": "b",
        "kubernetes.io/metadata.name": k8s_namespace,
    }


def test_a_drifted_priority_class_is_recreated_and_a_foreign_one_refused(
    k8s_backend: Any, k8s_admin: Admin
) -> None:
    name = f"gpu-portal-t{uuid.uuid4().hex[:8]}"
    k8s_backend.ensure_priority_classes([PrioritySpec(name, 500, "PreemptLowerPriority")])
    k8s_backend.ensure_priority_classes([PrioritySpec(name, 700, "Never")])
    pc = k8s_admin.scheduling.read_priority_class(name)
    assert (pc.value, pc.preemption_policy) == (700, "Never")

    foreign = f"foreign-t{uuid.uuid4().hex[:8]}"
    k8s_admin.scheduling.create_priority_class({"metadata": {"name": foreign}, "value": 1})
    try:
        with pytest.raises(PermanentClusterError):
            k8s_backend.ensure_priority_classes([PrioritySpec(foreign, 2)])
        assert k8s_admin.scheduling.read_priority_class(foreign).value == 1
    finally:
        k8s_admin.scheduling.delete_priority_class(foreign)
        k8s_admin.scheduling.delete_priority_class(name)


def _bare_pod(name: str, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example.com/ml/train:1.0",
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                }
            ],
            "nodeSelector": {"gpu-portal/pool": "a100-training"},
            "tolerations": [
                {
                    "key": GPU_TOLERATION.key,
                    "operator": "Equal",
                    "value": GPU_TOLERATION.value,
                    "effect": "NoSchedule",
                }
            ],
            "restartPolicy": "Never",
        },
    }


def test_resource_quota_rejects_gpus_beyond_the_quota_even_when_the_portal_is_bypassed(
    k8s_backend: Any,
    k8s_namespace: str,
    k8s_admin: Admin,
    k8s_testbed: Any,
    portal_priorities: None,
) -> None:
    k8s_backend.ensure_project(project(k8s_namespace, **{"requests.nvidia.com/gpu": 2}))
    # Admission enforces against status, which the resourcequota controller fills in.
    eventually(
        lambda: (
            k8s_admin.core.read_namespaced_resource_quota(
                "gpu-portal-quota", k8s_namespace
            ).status.hard
        ),
        what="quota status",
    )
    k8s_testbed.wait_default_service_account(k8s_namespace)
    with pytest.raises(ApiException) as refused:
        k8s_admin.core.create_namespaced_pod(k8s_namespace, _bare_pod("too-big", 3))
    assert refused.value.status == 403
    body = str(refused.value.body)
    assert "exceeded quota" in body and "requests.nvidia.com/gpu" in body

    k8s_admin.core.create_namespaced_pod(k8s_namespace, _bare_pod("fits", 2))
    with pytest.raises(ApiException) as full:
        k8s_admin.core.create_namespaced_pod(k8s_namespace, _bare_pod("one-more", 1))
    assert full.value.status == 403

    # Through the backend: the Job exists, but the Job controller cannot create its pod; it
    # says why only in a FailedCreate event, which the backend reads for a Job without a pod.
    spec = job(k8s_namespace, gpu_count=1)
    k8s_backend.launch(spec)
    status = eventually(
        lambda: (
            s
            if (s := k8s_backend.get_workload(k8s_namespace, spec.request_id, spec.attempt)).reason
            == "FailedCreate"
            else None
        ),
        timeout=15,
        what="the quota's refusal",
    )
    assert status.phase == "pending"
    assert "exceeded quota" in status.message and "requests.nvidia.com/gpu" in status.message
    events = k8s_admin.core.list_namespaced_event(k8s_namespace).items
    assert any(e.reason == "FailedCreate" and "exceeded quota" in e.message for e in events)
