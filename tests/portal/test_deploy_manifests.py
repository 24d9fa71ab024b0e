"""The in-cluster manifests (deploy/manifests/) are valid Kubernetes objects that keep promises.

Validated offline against the Kubernetes 1.37 schemas (kubernetes-validate, strict: unknown
fields fail). Invariants: exactly one beat that is never doubled during an upgrade, probes on
/healthz and /readyz, no service-account token in any pod but the worker's, and worker
ClusterRoles (deploy/helm/gpu-portal/files/rbac.yaml) that grant the verbs
runtime/cluster/kubernetes*.py calls — derived from its source here, so a new client call without
its RBAC rule fails this test — with cluster-wide calls in the cluster-wide role only.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from django.conf import settings

from scripts.testbed.cluster import portal_admission_policies, portal_rbac_rules

ROOT = Path(settings.BASE_DIR)
MANIFESTS = ROOT / "deploy" / "manifests"
KUBERNETES_VERSION = "1.37.0"
WORKLOADS = {"Deployment", "Job"}


def load_objects() -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    for path in sorted(MANIFESTS.glob("*.yaml")):
        objects.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc)
    return objects


OBJECTS = load_objects()


def named(kind: str, name: str) -> dict[str, Any]:
    matches = [o for o in OBJECTS if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind}/{name}, found {len(matches)}"
    return matches[0]


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


@pytest.mark.parametrize(
    "obj", OBJECTS, ids=[f"{o['kind']}/{o['metadata']['name']}" for o in OBJECTS]
)
def test_every_manifest_is_valid_against_the_kubernetes_schema(obj: dict[str, Any]) -> None:
    kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def test_the_manifests_hold_every_component() -> None:
    kinds = {(o["kind"], o["metadata"]["name"]) for o in OBJECTS}
    assert {
        ("Deployment", "gpu-portal-web"),
        ("Service", "gpu-portal-web"),
        ("Deployment", "gpu-portal-worker"),
        ("Deployment", "gpu-portal-beat"),
        ("Job", "gpu-portal-migrate"),
        ("ConfigMap", "gpu-portal-config"),
        ("Secret", "gpu-portal-secrets"),
        ("ClusterRole", "gpu-portal"),
        ("ClusterRole", "gpu-portal-workloads"),
        ("ClusterRoleBinding", "gpu-portal"),
        ("ValidatingAdmissionPolicy", "gpu-portal-rolebindings"),
        ("ValidatingAdmissionPolicy", "gpu-portal-namespaces"),
    } <= kinds


def test_exactly_one_beat_and_upgrades_never_run_two() -> None:
    beats = [
        o
        for o in OBJECTS
        if o["kind"] in WORKLOADS
        and any(
            "beat" in c.get("command", []) or "beat" in c.get("args", [])
            for c in pod_spec(o)["containers"]
        )
    ]
    assert [b["metadata"]["name"] for b in beats] == ["gpu-portal-beat"]
    assert beats[0]["spec"]["replicas"] == 1
    assert beats[0]["spec"]["strategy"]["type"] == "Recreate"


def test_web_probes_liveness_on_healthz_and_readiness_on_readyz() -> None:
    container = pod_spec(named("Deployment", "gpu-portal-web"))["containers"][0]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    from django.urls import resolve

    from portal import health

    assert resolve("/healthz").func is health.healthz
    assert resolve("/readyz").func is health.readyz


def test_only_the_worker_pods_carry_a_service_account_token() -> None:
    for obj in OBJECTS:
        if obj["kind"] not in WORKLOADS:
            continue
        spec = pod_spec(obj)
        if obj["metadata"]["name"] in {"gpu-portal-worker", "gpu-portal-worker-periodic"}:
            assert spec["serviceAccountName"] == "gpu-portal-worker"
            continue
        assert spec["automountServiceAccountToken"] is False, obj["metadata"]["name"]
        assert spec["serviceAccountName"] != "gpu-portal-worker", obj["metadata"]["name"]
    bound = {
        subject["name"]
        for o in OBJECTS
        if o["kind"] in {"ClusterRoleBinding", "RoleBinding"}
        for subject in o["subjects"]
    }
    assert bound == {"gpu-portal-worker"}


def test_every_pod_runs_as_non_root_with_a_read_only_root_and_resource_requests() -> None:
    for obj in OBJECTS:
        if obj["kind"] not in WORKLOADS:
            continue
        spec = pod_spec(obj)
        assert spec["securityContext"]["runAsNonRoot"] is True
        for container in spec.get("initContainers", []) + spec["containers"]:
            where = f"{obj['metadata']['name']}/{container['name']}"
            assert container["securityContext"]["readOnlyRootFilesystem"] is True, where
            assert container["securityContext"]["allowPrivilegeEscalation"] is False, where
            assert {"cpu", "memory"} <= set(container["resources"]["requests"]), where
            refs = {next(iter(ref)) for ref in container["envFrom"]}
            assert refs == {"configMapRef", "secretRef"}, where


# How a client method name maps onto an RBAC verb and resource.
VERBS = {
    "create": "create",
    "read": "get",
    "patch": "patch",
    "replace": "update",
    "delete_collection": "deletecollection",
    "delete": "delete",
    "list": "list",
}
GROUPS = {
    "core": "",
    "batch": "batch",
    "apps": "apps",
    "scheduling": "scheduling.k8s.io",
    "networking": "networking.k8s.io",
    "rbac": "rbac.authorization.k8s.io",
}
PLURALS = {
    "namespace": "namespaces",
    "node": "nodes",
    "resource_quota": "resourcequotas",
    "limit_range": "limitranges",
    "service": "services",
    "pod": "pods",
    "pod_log": "pods/log",
    "ingress": "ingresses",
    "job": "jobs",
    "deployment": "deployments",
    "priority_class": "priorityclasses",
    "event": "events",
    "persistent_volume_claim": "persistentvolumeclaims",
    "secret": "secrets",
    "network_policy": "networkpolicies",
    "role_binding": "rolebindings",
}


CLUSTER_SCOPED = frozenset(
    {
        "namespaces",
        "nodes",
        "priorityclasses",
        "resourceslices",
        "resourceflavors",
        "cohorts",
        "clusterqueues",
        "workloadpriorityclasses",
    }
)
# What the cluster-wide role may do to namespaced resources: read (inventory, sync, Kueue's
# queues), and create the one RoleBinding the admission policy allows.
CLUSTER_WIDE_ON_NAMESPACED = frozenset({"get", "list", "watch"})


def backend_permissions() -> set[tuple[str, str, str, bool]]:
    """(group, resource, verb, cluster-wide) for every typed client call in the kubernetes
    backend's source (custom objects, such as HTTPRoutes, claim templates and Kueue's, name
    their resource in a string: the k8s tests under the same roles cover them)."""
    source = "\n".join(
        path.read_text() for path in sorted((ROOT / "runtime" / "cluster").glob("kubernetes*.py"))
    )
    needed: set[tuple[str, str, str, bool]] = set()
    for api, method in re.findall(
        r"self\.(core|batch|apps|scheduling|networking|rbac)\.([a-z_]+)", source
    ):
        verb_word = next(v for v in VERBS if method.startswith(v + "_"))
        kind = method.removeprefix(verb_word + "_").removeprefix("namespaced_")
        everywhere = kind.endswith("_for_all_namespaces")
        kind = kind.removesuffix("_for_all_namespaces")
        resource = PLURALS[kind]
        cluster_wide = everywhere or resource in CLUSTER_SCOPED
        needed.add((GROUPS[api], resource, VERBS[verb_word], cluster_wide))
        if "watcher.stream(" in source and method == "list_pod_for_all_namespaces":
            needed.add(("", "pods", "watch", True))
    return needed


def permissions(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_worker_rbac_grants_what_the_backend_calls_and_namespaced_writes_per_namespace() -> None:
    rules = portal_rbac_rules()
    cluster, namespace = permissions(rules["cluster"]), permissions(rules["namespace"])
    assert "*" not in {part for permission in cluster | namespace for part in permission}
    for group, resource, verb, cluster_wide in backend_permissions():
        held = cluster if cluster_wide else cluster | namespace
        assert (group, resource, verb) in held, (group, resource, verb, cluster_wide)
    # Cluster-wide, namespaced objects are only read; Secrets and claims not even that.
    for group, resource, verb in cluster:
        if resource in CLUSTER_SCOPED:
            continue
        if (group, resource) == ("rbac.authorization.k8s.io", "rolebindings"):
            continue  # bounded by the admission policy (tests/k8s/test_least_privilege.py)
        if (group, resource) == ("rbac.authorization.k8s.io", "clusterroles"):
            assert verb == "bind"
            continue
        assert verb in CLUSTER_WIDE_ON_NAMESPACED, (group, resource, verb)
    assert not {r for _, r, _ in cluster} & {"secrets", "persistentvolumeclaims", "pods/log"}
    (bind,) = [rule for rule in rules["cluster"] if rule["resources"] == ["clusterroles"]]
    assert bind["resourceNames"] == ["gpu-portal-workloads"]


def test_the_plain_manifests_carry_the_chart_files_roles() -> None:
    rules = portal_rbac_rules()
    assert named("ClusterRole", "gpu-portal")["rules"] == rules["cluster"]
    assert named("ClusterRole", "gpu-portal-workloads")["rules"] == rules["namespace"]
    binding = named("ClusterRoleBinding", "gpu-portal")
    assert binding["roleRef"]["name"] == "gpu-portal"
    policies = portal_admission_policies("system:serviceaccount:gpu-portal:gpu-portal-worker")
    for policy in policies:
        assert named(policy["kind"], policy["metadata"]["name"]) == policy


def test_backend_permissions_are_read_from_the_source() -> None:
    needed = backend_permissions()
    assert ("batch", "jobs", "create", False) in needed
    assert ("", "pods", "watch", True) in needed
    assert ("scheduling.k8s.io", "priorityclasses", "delete", True) in needed
    assert ("rbac.authorization.k8s.io", "rolebindings", "create", False) in needed
    assert not any(verb == "update" and resource == "namespaces" for _, resource, verb, _ in needed)


def test_manifest_commands_exist_in_the_project() -> None:
    from django.core.management import get_commands

    for obj in OBJECTS:
        if obj["kind"] not in WORKLOADS:
            continue
        spec = pod_spec(obj)
        for container in spec.get("initContainers", []) + spec["containers"]:
            command = container["command"]
            if command[:2] == ["python", "manage.py"]:
                assert command[2] in get_commands()
            elif command[0] == "gunicorn":
                module, _, attribute = command[1].partition(":")
                assert hasattr(__import__(module, fromlist=[attribute]), attribute)
            elif command[0] == "celery":
                assert command[1:3] == ["-A", "portal"]
                assert command[3] in {"worker", "beat"}
            else:
                raise AssertionError(f"unexpected command {command}")
