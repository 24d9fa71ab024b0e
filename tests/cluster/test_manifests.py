"""The manifest builders: schema-valid objects with the right GPU resources for every mode."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import kubernetes_validate
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes import client as k8s

from runtime.cluster import kubernetes_manifests as manifests
from runtime.cluster import pod_manifests, project_manifests
from runtime.cluster.base import (
    ATTEMPT_LABEL,
    MANAGED_BY_LABEL,
    REQUEST_LABEL,
    SHARING_MODES,
    WORKLOAD_KINDS,
    LimitRangeSpec,
    PrioritySpec,
    SharingMode,
    WorkloadKind,
    WorkloadSpec,
)
from tests.cluster.specs import NAMESPACE, project, workload

#: Validate against every schema from 1.33 on that kubernetes-validate ships.
K8S_VERSIONS = ("1.33.0", "1.35.0", "1.37.0")
MATRIX = [(kind, sharing) for kind in WORKLOAD_KINDS for sharing in SHARING_MODES]


def assert_valid(manifest: dict[str, Any]) -> None:
    for version in K8S_VERSIONS:
        kubernetes_validate.validate(manifest, version, strict=True)


def round_trips_through_client_models(manifest: dict[str, Any]) -> bool:
    """The client's model keeps every field we set (a typo'd key would be dropped)."""
    model = getattr(k8s, f"V1{manifest['kind']}").from_dict(manifest)
    return bool(k8s.ApiClient().sanitize_for_serialization(model) == manifest)


def pod_template(manifest: dict[str, Any]) -> dict[str, Any]:
    return manifest["spec"]["template"]


def container(manifest: dict[str, Any]) -> dict[str, Any]:
    return pod_template(manifest)["spec"]["containers"][0]


@pytest.mark.parametrize(("kind", "sharing"), MATRIX)
def test_every_workload_manifest_is_schema_valid_and_round_trips(
    kind: WorkloadKind, sharing: SharingMode
) -> None:
    for manifest in manifests.workload_manifests(workload(kind, sharing)):
        assert_valid(manifest)
        assert round_trips_through_client_models(manifest)


@pytest.mark.parametrize(("kind", "sharing"), MATRIX)
def test_minimal_workload_manifest_is_schema_valid(
    kind: WorkloadKind, sharing: SharingMode
) -> None:
    spec = workload(
        kind,
        sharing,
        command=(),
        args=(),
        env={},
        cpu=None,
        memory=None,
        node_selector={},
        tolerations=(),
        node_name=None,
        priority_class_name=None,
        max_runtime_seconds=None,
        owner="",
        reason="",
        extra_labels={},
        extra_annotations={},
    )
    for manifest in manifests.workload_manifests(spec):
        assert_valid(manifest)


@pytest.mark.parametrize(
    ("sharing", "limits"),
    [
        ("exclusive", {"nvidia.com/gpu": "2", "cpu": "4", "memory": "32Gi"}),
        (
            "vgpu",
            {
                "nvidia.com/gpu": "1",
                "nvidia.com/gpumem": "12288",
                "nvidia.com/gpucores": "25",
                "cpu": "4",
                "memory": "32Gi",
            },
        ),
        ("mig", {"nvidia.com/mig-1g.10gb": "1", "cpu": "4", "memory": "32Gi"}),
    ],
)
@pytest.mark.parametrize("kind", WORKLOAD_KINDS)
def test_container_asks_for_the_gpu_resources_of_its_sharing_mode(
    kind: WorkloadKind, sharing: SharingMode, limits: dict[str, str]
) -> None:
    first = manifests.workload_manifests(workload(kind, sharing))[0]
    assert container(first)["resources"] == {
        "limits": limits,
        "requests": {"cpu": "4", "memory": "32Gi"},
    }


def test_vgpu_without_memory_or_cores_asks_for_the_share_only() -> None:
    spec = workload(
        "job", "vgpu", vgpu_memory_mib=None, vgpu_cores_percent=None, cpu=None, memory=None
    )
    assert container(manifests.job_manifest(spec))["resources"]["limits"] == {"nvidia.com/gpu": "1"}


def test_cpu_only_exclusive_workload_asks_for_no_gpu() -> None:
    spec = workload("job", "exclusive", gpu_count=0, memory=None)
    # CPU's limit is its request (a LimitRange default could otherwise undercut it).
    assert container(manifests.job_manifest(spec))["resources"]["limits"] == {"cpu": "4"}


def test_job_runs_once_with_deadline_ttl_and_placement() -> None:
    job = manifests.job_manifest(workload("job", "exclusive"))
    assert job["metadata"]["name"] == "gpr-812-a1"
    assert job["metadata"]["namespace"] == NAMESPACE
    spec = job["spec"]
    assert spec["backoffLimit"] == 0
    assert spec["activeDeadlineSeconds"] == 7200
    assert spec["ttlSecondsAfterFinished"] == manifests.JOB_TTL_SECONDS_AFTER_FINISHED
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["schedulerName"] == "default-scheduler"
    assert pod["priorityClassName"] == "gpu-portal-high"
    assert pod["nodeSelector"] == {
        "gpu-portal/pool": "a100-train",
        "kubernetes.io/hostname": "gpu-a100-01",
    }
    assert "nodeName" not in pod
    assert pod["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {
            "key": "gpu-portal/pool",
            "operator": "Equal",
            "value": "a100-train",
            "effect": "NoSchedule",
        },
    ]
    assert pod["automountServiceAccountToken"] is False
    assert container(job)["command"] == ["python", "train.py"]
    assert container(job)["env"] == [
        {"name": "PORTAL_REQUEST", "value": "812"},
        {"name": "PREEMPT_NOTICE", "value": "/etc/gpu-portal/notice/preempt-deadline"},
        {"name": "WANDB_MODE", "value": "offline"},
    ]


def test_job_without_portal_placement_leaves_the_node_to_the_scheduler() -> None:
    job = manifests.job_manifest(workload("job", "vgpu", node_name=None))
    pod = pod_template(job)["spec"]
    assert pod["nodeSelector"] == {"gpu-portal/pool": "a100-train"}
    assert pod["schedulerName"] == "hami-scheduler"


def test_job_and_pod_carry_the_portal_labels_and_annotations() -> None:
    job = manifests.job_manifest(workload("job", "mig", attempt=3))
    for metadata in (job["metadata"], pod_template(job)["metadata"]):
        assert metadata["labels"] == {
            "app.kubernetes.io/managed-by": "gpu-portal",
            "gpu-portal/team": "vision",
            "gpu-portal/project": "detection",
            "gpu-portal/request": "812",
            "gpu-portal/attempt": "3",
            "gpu-portal/workload": "gpr-812-a3",
            "gpu-portal/kind": "job",
            "example.com/cost-centre": "cv",
        }
        assert metadata["annotations"] == {
            "example.com/ticket": "OPS-1",
            "gpu-portal/owner": "alice",
            "gpu-portal/launch-reason": "admitted by the scheduler",
            "gpu-portal/max-runtime-seconds": "7200",
        }


def test_extra_labels_cannot_override_the_portal_labels() -> None:
    spec = workload(extra_labels={REQUEST_LABEL: "999", MANAGED_BY_LABEL: "helm"})
    labels = manifests.job_manifest(spec)["metadata"]["labels"]
    assert labels[REQUEST_LABEL] == "812"
    assert labels[MANAGED_BY_LABEL] == "gpu-portal"


@pytest.mark.parametrize(("kind", "port"), [("notebook", 8888), ("service", 8080)])
def test_deployment_and_service_for_long_running_kinds(kind: WorkloadKind, port: int) -> None:
    deployment, service = manifests.workload_manifests(workload(kind, "vgpu"))
    assert deployment["kind"] == "Deployment"
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    pod = pod_template(deployment)["spec"]
    assert pod["restartPolicy"] == "Always"
    # Rejected by the API for ReplicaSet pods; the portal's timeout reclaim enforces it.
    assert "activeDeadlineSeconds" not in pod
    assert container(deployment)["ports"] == [
        {"name": "http", "containerPort": port, "protocol": "TCP"}
    ]
    selector = deployment["spec"]["selector"]["matchLabels"]
    # By workload name, not attempt: a resumed attempt relabels the Deployment it takes over.
    assert selector == {
        MANAGED_BY_LABEL: "gpu-portal",
        REQUEST_LABEL: "812",
        "gpu-portal/workload": "gpr-812-a1",
    }
    assert selector.items() <= pod_template(deployment)["metadata"]["labels"].items()
    assert service["kind"] == "Service"
    assert service["metadata"]["name"] == deployment["metadata"]["name"]
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["selector"] == selector
    assert service["spec"]["ports"] == [
        {"name": "http", "port": port, "targetPort": port, "protocol": "TCP"}
    ]


def test_explicit_port_overrides_the_default() -> None:
    _, service = manifests.workload_manifests(workload("service", port=9000))
    assert service["spec"]["ports"][0]["port"] == 9000


def test_project_objects_are_schema_valid() -> None:
    spec = project()
    for manifest in (
        project_manifests.namespace_manifest(spec),
        project_manifests.resource_quota_manifest(spec),
        project_manifests.limit_range_manifest(spec),
    ):
        assert_valid(manifest)
        assert round_trips_through_client_models(manifest)


def test_namespace_carries_project_labels_and_pod_security() -> None:
    labels = project_manifests.namespace_manifest(project())["metadata"]["labels"]
    assert labels == {
        "app.kubernetes.io/managed-by": "gpu-portal",
        "gpu-portal/team": "vision",
        "gpu-portal/project": "detection",
        "pod-security.kubernetes.io/enforce": "baseline",
    }


def test_quota_mirrors_portal_quota_with_requests_prefix_for_extended_resources() -> None:
    quota = project_manifests.resource_quota_manifest(project())
    assert quota["metadata"]["name"] == "gpu-portal-quota"
    assert quota["spec"]["hard"] == {
        "requests.nvidia.com/gpu": "8",
        "requests.nvidia.com/mig-1g.10gb": "4",
        "requests.nvidia.com/gpumem": "98304",
        "requests.cpu": "64",
        "limits.memory": "512Gi",
        "pods": "50",
    }


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("nvidia.com/gpu", "requests.nvidia.com/gpu"),
        ("requests.nvidia.com/gpu", "requests.nvidia.com/gpu"),
        ("nvidia.com/mig-3g.40gb", "requests.nvidia.com/mig-3g.40gb"),
        ("cpu", "cpu"),
        ("limits.cpu", "limits.cpu"),
        ("count/jobs.batch", "count/jobs.batch"),
    ],
)
def test_quota_resource_names(name: str, key: str) -> None:
    assert project_manifests.quota_resource_name(name) == key


@pytest.mark.parametrize("name", ["limits.nvidia.com/gpu", "gpus"])
def test_quota_refuses_names_kubernetes_would_not_count(name: str) -> None:
    with pytest.raises(ValueError):
        project_manifests.quota_resource_name(name)


def test_quota_refuses_the_same_resource_twice() -> None:
    with pytest.raises(ValueError, match="twice"):
        project_manifests.quota_hard({"nvidia.com/gpu": 1, "requests.nvidia.com/gpu": 2})


def test_limit_range_sets_container_defaults() -> None:
    limits = project_manifests.limit_range_manifest(project())["spec"]["limits"]
    assert limits == [
        {
            "type": "Container",
            "default": {"cpu": "2", "memory": "8Gi"},
            "defaultRequest": {"cpu": "500m", "memory": "2Gi"},
            "max": {"memory": "256Gi"},
        }
    ]
    assert LimitRangeSpec().is_empty


@pytest.mark.parametrize("policy", ["PreemptLowerPriority", "Never"])
def test_priority_class_is_schema_valid(policy: Any) -> None:
    manifest = project_manifests.priority_class_manifest(
        PrioritySpec(name="gpu-portal-high", value=1000, preemption_policy=policy, description="x")
    )
    assert_valid(manifest)
    assert round_trips_through_client_models(manifest)
    assert manifest["value"] == 1000
    assert manifest["globalDefault"] is False
    assert manifest["metadata"]["labels"] == {MANAGED_BY_LABEL: "gpu-portal"}


def test_strict_validation_catches_a_misspelt_field() -> None:
    """Guards the guard: the schema check really is strict about unknown fields."""
    job = manifests.job_manifest(workload())
    job["spec"]["backofLimit"] = 0
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, K8S_VERSIONS[-1], strict=True)


@pytest.mark.parametrize(
    "changes",
    [
        {"sharing": "mig", "mig_profile": None},
        {"sharing": "mig", "mig_profile": "big"},
        {"sharing": "exclusive", "vgpu_memory_mib": 1024},
        {"sharing": "vgpu", "gpu_count": 0},
        {"gpu_count": -1},
        {"vgpu_cores_percent": 101, "sharing": "vgpu"},
        {"kind": "cronjob"},
        {"namespace": "Not_A_Namespace"},
        {"team_slug": ""},
        {"image": ""},
        {"max_runtime_seconds": 0},
        {"attempt": 0},
        {"port": 70000},
    ],
)
def test_workload_spec_rejects_inconsistent_values(changes: dict[str, Any]) -> None:
    valid = workload("job", "exclusive", gpu_count=1)
    with pytest.raises(ValueError):
        replace(valid, **changes)


label_values = st.from_regex(r"\A[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?\Z")


@st.composite
def workload_specs(draw: st.DrawFn) -> WorkloadSpec:
    sharing = draw(st.sampled_from(SHARING_MODES))
    kind = draw(st.sampled_from(WORKLOAD_KINDS))
    spec = workload(kind, sharing)
    changes: dict[str, Any] = {
        "request_id": draw(st.from_regex(r"\A[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?\Z")),
        "attempt": draw(st.integers(1, 9999)),
        "gpu_count": draw(st.integers(0 if sharing == "exclusive" else 1, 16)),
        "node_name": draw(st.none() | label_values),
        "max_runtime_seconds": draw(st.none() | st.integers(1, 30 * 86400)),
        "env": draw(st.dictionaries(st.from_regex(r"\A[A-Z_][A-Z0-9_]{0,10}\Z"), st.text())),
        "priority_class_name": draw(st.none() | st.just("gpu-portal-low")),
    }
    if sharing == "vgpu":
        changes["vgpu_memory_mib"] = draw(st.none() | st.integers(1, 81920))
        changes["vgpu_cores_percent"] = draw(st.none() | st.integers(1, 100))
    if sharing == "mig":
        changes["mig_profile"] = draw(st.sampled_from(["1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"]))
    return replace(spec, **changes)


@settings(max_examples=60, deadline=None)
@given(workload_specs())
def test_any_valid_spec_builds_schema_valid_manifests_with_its_name(spec: WorkloadSpec) -> None:
    for manifest in manifests.workload_manifests(spec):
        kubernetes_validate.validate(manifest, K8S_VERSIONS[-1], strict=True)
        assert manifest["metadata"]["name"] == spec.name
        assert manifest["metadata"]["labels"][ATTEMPT_LABEL] == str(spec.attempt)


@pytest.mark.parametrize("kind", ["job", "notebook", "service"])
def test_every_pod_can_read_its_preemption_deadline_from_the_file_preempt_notice_names(
    kind: WorkloadKind,
) -> None:
    """Env vars of a running container cannot change, so the deadline comes as a file: the
    downward API projects the pod's notice annotation into it; `PREEMPT_NOTICE` names it."""
    spec = replace(workload(kind, "exclusive"), termination_grace_seconds=90)
    first = manifests.workload_manifests(spec)[0]
    assert_valid(first)
    pod = pod_template(first)["spec"]
    env = {e["name"]: e.get("value") for e in container(first)["env"]}
    assert env["PREEMPT_NOTICE"] == "/etc/gpu-portal/notice/preempt-deadline"
    (volume,) = [v for v in pod["volumes"] if v["name"] == "gpu-portal-notice"]
    assert volume["downwardAPI"]["items"] == [
        {
            "path": "preempt-deadline",
            "fieldRef": {"fieldPath": "metadata.annotations['gpu-portal/preempt-notice']"},
        }
    ]
    assert {
        "name": "gpu-portal-notice",
        "mountPath": "/etc/gpu-portal/notice",
        "readOnly": True,
    } in container(first)["volumeMounts"]
    # The tier's grace is the pods' own: the garbage collector deletes them with it too.
    assert pod["terminationGracePeriodSeconds"] == 90


def test_the_portal_names_the_notice_file_even_when_the_user_sets_preempt_notice() -> None:
    spec = replace(workload("job", "exclusive"), env={"PREEMPT_NOTICE": "/tmp/mine"})
    env = [
        e for e in container(manifests.job_manifest(spec))["env"] if e["name"] == "PREEMPT_NOTICE"
    ]
    assert env == [{"name": "PREEMPT_NOTICE", "value": "/etc/gpu-portal/notice/preempt-deadline"}]


def test_workload_selectors_select_request_ids_a_hundred_at_a_time() -> None:
    portal = "app.kubernetes.io/managed-by=gpu-portal"
    assert pod_manifests.workload_selectors() == [portal]
    assert pod_manifests.workload_selectors(["12", "3", "12"]) == [
        f"{portal},gpu-portal/request in (12,3)"
    ]
    selectors = pod_manifests.workload_selectors([str(i) for i in range(250)])
    assert [s.count(",") for s in selectors] == [100, 100, 50]  # ids - 1, plus the portal's
    assert pod_manifests.workload_selectors([]) == []
