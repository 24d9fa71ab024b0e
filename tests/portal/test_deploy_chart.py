"""The Helm chart (deploy/helm/gpu-portal) renders valid Kubernetes objects that keep promises.

Rendered with the default values and each values file of the chart's ci/ folder, then validated
offline against the Kubernetes 1.37 schemas (kubernetes-validate, strict: unknown fields fail;
Gateway API kinds are checked by the test bed's API server, tests/k8s/test_helm_chart.py).
Invariants: exactly one beat that is never doubled during an upgrade, migrations as a hook,
probes on /healthz and /readyz, no service-account token in any pod but the workers', and a
worker ClusterRole that grants the verbs runtime/cluster/kubernetes*.py call — derived from
their source here, so a new client call without its RBAC rule fails this test.

Needs the helm binary (`make testbed-build`): skipped without it, failed without it in CI.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from django.conf import settings

from scripts.testbed.cluster import portal_admission_policies, portal_rbac_rules
from scripts.testbed.helm import CHART, CI_VALUES, helm_binary, render
from tests.support.web_server import gunicorn_app

ROOT = Path(settings.BASE_DIR)
KUBERNETES_VERSION = "1.37.0"
WORKLOADS = {"Deployment", "Job", "StatefulSet"}
# Kinds kubernetes-validate has no schema for (CRDs): the API server checks them.
CUSTOM_KINDS = {"HTTPRoute"}
VALUE_SETS = {"default": None, **{path.stem: path for path in CI_VALUES}}
PORTAL_COMPONENTS = {"web", "worker", "worker-periodic", "follower", "beat", "migrate"}


@pytest.fixture(autouse=True)
def _needs_helm() -> None:
    if not os.access(helm_binary(), os.X_OK):
        message = f"helm is not built ({helm_binary()}): run `make testbed-build`"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


@functools.cache
def rendered(value_set: str) -> tuple[dict[str, Any], ...]:
    path = VALUE_SETS[value_set]
    return tuple(render([path] if path else []))


def named(objects: tuple[dict[str, Any], ...], kind: str, name: str) -> dict[str, Any]:
    matches = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind}/{name}, found {len(matches)}"
    return matches[0]


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


def component(obj: dict[str, Any]) -> str:
    return str(obj["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"])


def portal_workloads(objects: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] in WORKLOADS and component(o) in PORTAL_COMPONENTS]


value_sets = pytest.mark.parametrize("value_set", sorted(VALUE_SETS))


@value_sets
def test_every_rendered_object_is_valid_against_the_kubernetes_schema(value_set: str) -> None:
    checked = 0
    for obj in rendered(value_set):
        if obj["kind"] in CUSTOM_KINDS:
            continue
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        checked += 1
    assert checked >= 15


@value_sets
def test_the_chart_holds_every_component(value_set: str) -> None:
    kinds = {(o["kind"], o["metadata"]["name"]) for o in rendered(value_set)}
    assert {
        ("Deployment", "gpu-portal-web"),
        ("Service", "gpu-portal-web"),
        ("Deployment", "gpu-portal-worker"),
        ("Deployment", "gpu-portal-worker-periodic"),
        ("Deployment", "gpu-portal-follower"),
        ("Deployment", "gpu-portal-beat"),
        ("Job", "gpu-portal-migrate"),
        ("ConfigMap", "gpu-portal"),
        ("ClusterRole", "gpu-portal"),
        ("ClusterRole", "gpu-portal-workloads"),
        ("ClusterRoleBinding", "gpu-portal"),
        ("NetworkPolicy", "gpu-portal-web"),
    } <= kinds


def test_the_default_values_read_secrets_from_the_operators_secret() -> None:
    objects = rendered("default")
    config = named(objects, "ConfigMap", "gpu-portal")["data"]
    assert config["WORKLOAD_DOMAIN"] == "gpu-workloads.example.net"
    assert "WORKLOAD_BASE_URL" not in config  # the portal refuses to start with it
    assert not [o for o in objects if o["kind"] == "Secret"]
    for workload in portal_workloads(objects):
        for container in pod_spec(workload)["containers"]:
            assert {"secretRef": {"name": "gpu-portal-secrets"}} in container["envFrom"]


def test_the_external_values_put_every_setting_where_the_portal_reads_it() -> None:
    objects = rendered("external-db-values")
    config = named(objects, "ConfigMap", "gpu-portal")["data"]
    secret = named(objects, "Secret", "gpu-portal")["stringData"]
    assert config["WORKLOAD_DOMAIN"] == "workloads.example.com"
    assert config["PROMETHEUS_URL"] == "http://prometheus-operated.monitoring.svc:9090"
    assert config["OIDC_RP_CLIENT_ID"] == "gpu-portal"
    assert config["ALLOWED_HOSTS"] == "gpu.example.com,gpu-portal-web.gpu-portal.svc"
    assert config["DEFAULT_FROM_EMAIL"] == "GPU Portal <gpu-portal@example.com>"
    assert config["PORTAL_URL"] == "https://gpu.example.com"
    assert secret["DATABASE_URL"].startswith("postgres://portal:ci-only@postgres.databases.svc")
    assert secret["REDIS_URL"] == "redis://redis.databases.svc:6379/0"
    assert secret["EMAIL_URL"] == "smtp+tls://portal:ci-only@smtp.example.com:587"
    assert secret["OIDC_RP_CLIENT_SECRET"] == "ci-only-client-secret"
    hosts = {
        rule["host"]: o["spec"]["tls"][0]["secretName"]
        for o in objects
        if o["kind"] == "Ingress"
        for rule in o["spec"]["rules"]
    }
    assert hosts == {
        "gpu.example.com": "gpu-portal-tls",
        "*.workloads.example.com": "gpu-portal-workloads-tls",
    }


def test_the_trial_values_bundle_the_databases_and_route_through_the_gateway() -> None:
    objects = rendered("bundled-httproute-values")
    secret = named(objects, "Secret", "gpu-portal")["stringData"]
    assert secret["DATABASE_URL"] == (
        f"postgres://portal:{secret['POSTGRES_PASSWORD']}@gpu-portal-postgresql:5432/portal"
    )
    assert secret["REDIS_URL"] == "redis://gpu-portal-redis:6379/0"
    assert {o["metadata"]["name"] for o in objects if o["kind"] == "StatefulSet"} == {
        "gpu-portal-postgresql",
        "gpu-portal-redis",
    }
    assert not [o for o in objects if o["kind"] == "Ingress"]
    route = named(objects, "HTTPRoute", "gpu-portal")
    assert route["spec"]["hostnames"] == ["portal.trial.example.com", "*.apps.trial.example.com"]
    assert route["spec"]["parentRefs"] == [
        {"name": "shared", "namespace": "gateway-system", "sectionName": "https"}
    ]
    config = named(objects, "ConfigMap", "gpu-portal")["data"]
    assert config["WORKLOAD_ROUTE"] == "httproute"
    # The database comes with the release, so the migrations run after install.
    job = named(objects, "Job", "gpu-portal-migrate")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "post-install,pre-upgrade"


@value_sets
def test_migrations_run_as_a_hook_with_their_own_config(value_set: str) -> None:
    objects = rendered(value_set)
    job = named(objects, "Job", "gpu-portal-migrate")
    assert job["metadata"]["annotations"]["helm.sh/hook"].endswith("pre-upgrade")
    container = pod_spec(job)["containers"][0]
    assert container["command"] == ["python", "manage.py", "migrate", "--noinput"]
    # A hook runs before the release's own objects exist: what it reads is a hook too.
    hooks = {
        (o["kind"], o["metadata"]["name"])
        for o in objects
        if "helm.sh/hook" in o["metadata"].get("annotations", {})
    }
    assert ("ConfigMap", "gpu-portal-migrate") in hooks
    assert ("ServiceAccount", "gpu-portal-migrate") in hooks
    config_ref = next(ref for ref in container["envFrom"] if "configMapRef" in ref)
    assert config_ref["configMapRef"]["name"] == "gpu-portal-migrate"
    hook_config = named(objects, "ConfigMap", "gpu-portal-migrate")["data"]
    assert hook_config == named(objects, "ConfigMap", "gpu-portal")["data"]


@value_sets
def test_exactly_one_beat_and_upgrades_never_run_two(value_set: str) -> None:
    beats = [
        o
        for o in rendered(value_set)
        if o["kind"] in WORKLOADS
        and any("beat" in c.get("command", []) for c in pod_spec(o)["containers"])
    ]
    assert [b["metadata"]["name"] for b in beats] == ["gpu-portal-beat"]
    assert beats[0]["spec"]["replicas"] == 1
    assert beats[0]["spec"]["strategy"]["type"] == "Recreate"


def test_web_probes_liveness_on_healthz_and_readiness_on_readyz() -> None:
    web = named(rendered("default"), "Deployment", "gpu-portal-web")
    container = pod_spec(web)["containers"][0]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    # The probes pass the host check and the HTTPS redirect as a forwarded request would.
    headers = {h["name"]: h["value"] for h in container["readinessProbe"]["httpGet"]["httpHeaders"]}
    assert headers == {"Host": "gpu.example.com", "X-Forwarded-Proto": "https"}
    from django.urls import resolve

    from portal import health

    assert resolve("/healthz").func is health.healthz
    assert resolve("/readyz").func is health.readyz


@value_sets
def test_only_the_worker_and_follower_pods_carry_a_service_account_token(value_set: str) -> None:
    objects = rendered(value_set)
    for obj in objects:
        if obj["kind"] not in WORKLOADS:
            continue
        spec = pod_spec(obj)
        if component(obj) in {"worker", "worker-periodic", "follower"}:
            assert spec["serviceAccountName"] == "gpu-portal-worker"
            assert spec["automountServiceAccountToken"] is True
            continue
        assert spec["automountServiceAccountToken"] is False, obj["metadata"]["name"]
        assert spec.get("serviceAccountName") != "gpu-portal-worker", obj["metadata"]["name"]
    bound = {
        subject["name"]
        for o in objects
        if o["kind"] in {"ClusterRoleBinding", "RoleBinding"}
        for subject in o["subjects"]
    }
    assert bound == {"gpu-portal-worker"}
    accounts = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ServiceAccount"}
    assert all(a["automountServiceAccountToken"] is False for a in accounts.values())


@value_sets
def test_every_pod_runs_as_non_root_with_a_read_only_root_and_resources(value_set: str) -> None:
    for obj in rendered(value_set):
        if obj["kind"] not in WORKLOADS:
            continue
        spec = pod_spec(obj)
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in spec.get("initContainers", []) + spec["containers"]:
            where = f"{obj['metadata']['name']}/{container['name']}"
            assert container["securityContext"]["readOnlyRootFilesystem"] is True, where
            assert container["securityContext"]["allowPrivilegeEscalation"] is False, where
            assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}, where
            assert {"cpu", "memory"} <= set(container["resources"]["requests"]), where
            assert {"cpu", "memory"} <= set(container["resources"]["limits"]), where


@value_sets
def test_network_policies_cover_every_pod_the_chart_makes(value_set: str) -> None:
    objects = rendered(value_set)
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    for obj in objects:
        if obj["kind"] not in WORKLOADS:
            continue
        labels = obj["spec"]["template"]["metadata"]["labels"]
        selecting = [
            p for p in policies if p["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
        ]
        assert selecting, f"no NetworkPolicy selects {obj['metadata']['name']}"
    web = named(objects, "NetworkPolicy", "gpu-portal-web")
    sources = [
        peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
        for peer in web["spec"]["ingress"][0]["from"]
    ]
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    path = VALUE_SETS[value_set]
    overrides = yaml.safe_load(path.read_text()) if path else {}
    expected = {**values["networkPolicy"], **overrides.get("networkPolicy", {})}
    assert sources[0] == expected["ingressControllerNamespace"]
    for name in ("gpu-portal-worker", "gpu-portal-follower", "gpu-portal-beat"):
        policy = named(objects, "NetworkPolicy", name)
        assert policy["spec"]["policyTypes"] == ["Ingress"]
        assert "ingress" not in policy["spec"]  # no connections in at all


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


def test_the_chart_renders_the_roles_and_policies_of_its_files() -> None:
    objects = rendered("default")
    rules = portal_rbac_rules()
    assert named(objects, "ClusterRole", "gpu-portal")["rules"] == rules["cluster"]
    assert named(objects, "ClusterRole", "gpu-portal-workloads")["rules"] == rules["namespace"]
    binding = named(objects, "ClusterRoleBinding", "gpu-portal")
    assert binding["roleRef"]["name"] == "gpu-portal"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "gpu-portal-worker", "namespace": "gpu-portal"}
    ]
    policies = portal_admission_policies("system:serviceaccount:gpu-portal:gpu-portal-worker")
    assert policies
    for policy in policies:
        assert named(objects, policy["kind"], policy["metadata"]["name"]) == policy


def test_backend_permissions_are_read_from_the_source() -> None:
    needed = backend_permissions()
    assert ("batch", "jobs", "create", False) in needed
    assert ("", "pods", "watch", True) in needed
    assert ("scheduling.k8s.io", "priorityclasses", "delete", True) in needed
    assert ("rbac.authorization.k8s.io", "rolebindings", "create", False) in needed
    assert not any(verb == "update" and resource == "namespaces" for _, resource, verb, _ in needed)


@value_sets
def test_chart_commands_exist_in_the_project(value_set: str) -> None:
    from django.core.management import get_commands

    for obj in portal_workloads(rendered(value_set)):
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
