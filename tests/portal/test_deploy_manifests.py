"""The in-cluster manifests (deploy/manifests/) are valid Kubernetes objects that keep promises.

Validated offline against the Kubernetes 1.37 schemas (kubernetes-validate, strict: unknown
fields fail). Invariants: exactly one beat that is never doubled during an upgrade, probes on
/healthz and /readyz, no service-account token in any pod but the worker's, and a worker
ClusterRole that grants exactly the verbs runtime/cluster/kubernetes.py calls — derived from
its source here, so a new client call without its RBAC rule fails this test.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from django.conf import settings

from scripts.testbed.cluster import PORTAL_RBAC_RULES
from tests.support.web_server import gunicorn_app

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
        ("ClusterRole", "gpu-portal-worker"),
        ("ClusterRoleBinding", "gpu-portal-worker"),
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
}


def backend_permissions() -> set[tuple[str, str, str]]:
    """(group, resource, verb) for every typed client call in the kubernetes backend's source
    (custom objects, such as HTTPRoutes, claim templates and Kueue's, name their resource in a
    string: the test bed's role below covers them)."""
    source = "\n".join(
        path.read_text() for path in sorted((ROOT / "runtime" / "cluster").glob("kubernetes*.py"))
    )
    needed: set[tuple[str, str, str]] = set()
    for api, method in re.findall(
        r"self\.(core|batch|apps|scheduling|networking)\.([a-z_]+)", source
    ):
        verb_word = next(v for v in VERBS if method.startswith(v + "_"))
        kind = method.removeprefix(verb_word + "_").removeprefix("namespaced_")
        kind = kind.removesuffix("_for_all_namespaces")
        needed.add((GROUPS[api], PLURALS[kind], VERBS[verb_word]))
        if "watcher.stream(" in source and method == "list_pod_for_all_namespaces":
            needed.add(("", "pods", "watch"))
    return needed


def test_worker_rbac_grants_exactly_what_the_backend_calls() -> None:
    role = named("ClusterRole", "gpu-portal-worker")
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert "*" not in {part for permission in granted for part in permission}
    assert backend_permissions() <= granted
    # Exactly the role the k8s tests run the backend under on a real API server.
    assert granted == {
        (group, resource, verb)
        for rule in PORTAL_RBAC_RULES
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    binding = named("ClusterRoleBinding", "gpu-portal-worker")
    assert binding["roleRef"]["name"] == "gpu-portal-worker"


def test_backend_permissions_are_read_from_the_source() -> None:
    needed = backend_permissions()
    assert ("batch", "jobs", "create") in needed
    assert ("", "pods", "watch") in needed
    assert ("scheduling.k8s.io", "priorityclasses", "delete") in needed
    assert not any(verb == "update" and resource == "namespaces" for _, resource, verb in needed)


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
                assert callable(gunicorn_app(command))
            elif command[0] == "celery":
                assert command[1:3] == ["-A", "portal"]
                assert command[3] in {"worker", "beat"}
            else:
                raise AssertionError(f"unexpected command {command}")
