"""The Helm chart against the test bed's real API server.

For the default values and each values file of the chart's ci/ folder: `helm lint --strict`,
`helm template`, then every rendered object (hooks included) is sent to the API server as a
server-side apply with dryRun=All: the server's own schemas (the Gateway API CRDs installed for
the HTTPRoute), its admission and RBAC's escalation check judge them. Then the namespaced objects
are applied for real into a namespace of their own, and read back. Cluster-scoped objects (the
ClusterRoles and their binding) are only dry-run: the test bed's own `gpu-portal` role stays.
A field the schema does not know fails the apply, as the last test shows.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from scripts.testbed.helm import CHART, CI_VALUES, HelmError, helm_binary, lint, render

pytestmark = pytest.mark.k8s

VALUE_SETS = {"default": None, **{path.stem: path for path in CI_VALUES}}
FIELD_MANAGER = "gpu-portal-chart-test"


@pytest.fixture(scope="module")
def helm_built() -> None:
    if not os.access(helm_binary(), os.X_OK):
        message = f"helm is not built ({helm_binary()}): run `make testbed-build`"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="module")
def dynamic(k8s_testbed: Any, helm_built: None) -> Any:
    """A dynamic client as the test bed's admin, with the Gateway API CRDs installed."""
    from kubernetes.dynamic import DynamicClient

    from scripts.testbed.gateway_api import install_crds

    install_crds(k8s_testbed)
    return DynamicClient(k8s_testbed.api_client())


@pytest.fixture
def release_namespace(k8s_admin: Any) -> Iterator[str]:
    name = f"chart-{uuid.uuid4().hex[:8]}"
    k8s_admin.core.create_namespace({"metadata": {"name": name}})
    yield name
    with contextlib.suppress(Exception):
        k8s_admin.core.delete_namespace(name, _preload_content=False)


def apply(dynamic: Any, obj: dict[str, Any], namespace: str, *, dry_run: bool) -> Any:
    resource = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    return dynamic.server_side_apply(
        resource,
        body=obj,
        namespace=namespace if resource.namespaced else None,
        field_manager=FIELD_MANAGER,
        force_conflicts=True,
        dry_run="All" if dry_run else None,
    )


def is_namespaced(dynamic: Any, obj: dict[str, Any]) -> bool:
    resource = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    return bool(resource.namespaced)


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_the_chart_lints_renders_and_applies_to_the_api_server(
    dynamic: Any, release_namespace: str, value_set: str
) -> None:
    from kubernetes.client.exceptions import ApiException

    path = VALUE_SETS[value_set]
    files = [path] if path else []
    lint(files)
    objects = render(files, namespace=release_namespace)
    kinds = {o["kind"] for o in objects}
    assert {"Deployment", "Job", "ClusterRole", "NetworkPolicy", "ServiceAccount"} <= kinds

    # 1. Everything, as a dry run: the API server's schemas, defaulting and admission.
    refused = []
    for obj in objects:
        try:
            apply(dynamic, obj, release_namespace, dry_run=True)
        except ApiException as exc:
            refused.append(f"{obj['kind']}/{obj['metadata']['name']}: {exc.status} {exc.body}")
    assert not refused, "\n".join(refused)

    # 2. The namespaced objects for real, then read back as the server stored them.
    namespaced = [o for o in objects if is_namespaced(dynamic, o)]
    assert len(namespaced) >= 10
    for obj in namespaced:
        apply(dynamic, obj, release_namespace, dry_run=False)
    for obj in namespaced:
        resource = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        stored = resource.get(name=obj["metadata"]["name"], namespace=release_namespace)
        assert stored.metadata.labels["app.kubernetes.io/instance"] == "gpu-portal"
    web = dynamic.resources.get(api_version="apps/v1", kind="Deployment").get(
        name="gpu-portal-web", namespace=release_namespace
    )
    assert web.spec.template.spec.automountServiceAccountToken is False
    assert web.spec.template.spec.containers[0].readinessProbe.httpGet.path == "/readyz"
    binding = next(o for o in objects if o["kind"] == "ClusterRoleBinding")
    assert binding["subjects"][0]["namespace"] == release_namespace


def test_a_schema_mistake_fails_the_apply(dynamic: Any, release_namespace: str) -> None:
    """The check above can fail: a misspelt field and a wrong type are refused by the server."""
    from kubernetes.client.exceptions import ApiException

    objects = render(namespace=release_namespace)
    web = next(
        o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("-web")
    )
    misspelt = yaml.safe_load(yaml.safe_dump(web))
    misspelt["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {"periodSeconds": 5}
    with pytest.raises(ApiException) as refused:
        apply(dynamic, misspelt, release_namespace, dry_run=True)
    # kube-apiserver 1.36 answers a server-side apply it cannot type with 500, naming the field.
    assert "readinesProbe: field not declared in schema" in str(refused.value.body)

    wrong_type = yaml.safe_load(yaml.safe_dump(web))
    wrong_type["spec"]["replicas"] = "two"
    with pytest.raises(ApiException) as refused:
        apply(dynamic, wrong_type, release_namespace, dry_run=True)
    assert ".spec.replicas" in str(refused.value.body)


def test_helm_refuses_values_that_cannot_work(helm_built: None) -> None:
    with pytest.raises(HelmError, match="no database"):
        render(set_values=["existingSecret="])
    with pytest.raises(HelmError, match="choose one of ingress.enabled and httpRoute.enabled"):
        render(set_values=["httpRoute.enabled=true"])
    # values.schema.json: a misspelt key, a type or a URL scheme that cannot work.
    with pytest.raises(HelmError, match="additional properties 'workloadDomian' not allowed"):
        render(set_values=["workloadDomian=apps.example.com"])
    with pytest.raises(HelmError, match="/web/workers"):
        render(set_values=["web.workers=0"])
    with pytest.raises(HelmError, match="/email/url"):
        render(set_values=["email.url=https://smtp.example.com"])
    # Workloads never share the portal's origin: a workload domain is required.
    with pytest.raises(HelmError, match="/workloadDomain"):
        render(set_values=["workloadDomain="])
    assert (CHART / "files" / "rbac.yaml").is_file()
