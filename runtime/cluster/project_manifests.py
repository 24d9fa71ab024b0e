"""Pure builders of a project's objects: its namespace, ResourceQuota and LimitRange, its
claims and Secrets, and the portal's PriorityClasses, as API-shaped dicts.

No client, no I/O, like `kubernetes_manifests` (the objects of a launch).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runtime.cluster.names import (
    GANG_SIZE_LABEL,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    PROJECT_LABEL,
    REVISION_ANNOTATION,
    TEAM_LABEL,
)
from runtime.cluster.specs import (
    LimitRangeSpec,
    PrioritySpec,
    ProjectDataSpec,
    ProjectSpec,
    SecretSpec,
    VolumeClaimSpec,
)

Manifest = dict[str, Any]

QUOTA_NAME = "gpu-portal-quota"
#: The ClusterRole holding the portal's rights inside a project namespace
#: (deploy/helm/gpu-portal/files/rbac.yaml `namespace:`), and the RoleBinding that grants it
#: there to the portal itself.
WORKLOADS_ROLE = "gpu-portal-workloads"
LIMIT_RANGE_NAME = "gpu-portal-limits"
#: Pod Security level enforced in project namespaces: GPU workloads need no privileges, and
#: the device plugin injects devices, so `baseline` fits and blocks hostPath/privileged pods.
POD_SECURITY_LABEL = "pod-security.kubernetes.io/enforce"
POD_SECURITY_LEVEL = "baseline"
DENY_POLICY_NAME = "gpu-portal-default-deny"
INGRESS_POLICY_NAME = "gpu-portal-allow-ingress-controller"
GANG_POLICY_NAME = "gpu-portal-allow-gang"
#: Set by Kubernetes on every namespace (1.22+): a namespace selector needs no label of ours.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"

# Quota names Kubernetes accepts without a domain: the standard compute/object resources.
_STANDARD_QUOTA_NAMES = frozenset(
    {
        "pods",
        "services",
        "services.loadbalancers",
        "services.nodeports",
        "secrets",
        "configmaps",
        "persistentvolumeclaims",
        "replicationcontrollers",
        "resourcequotas",
        "cpu",
        "memory",
        "ephemeral-storage",
    }
)


def project_labels(team_slug: str, project_slug: str) -> dict[str, str]:
    """Labels on every object of a project."""
    return {MANAGED_BY_LABEL: MANAGED_BY_VALUE, TEAM_LABEL: team_slug, PROJECT_LABEL: project_slug}


def namespace_manifest(spec: ProjectSpec) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": spec.namespace,
            "labels": {
                **project_labels(spec.team_slug, spec.project_slug),
                POD_SECURITY_LABEL: POD_SECURITY_LEVEL,
            },
        },
    }


def workloads_role_binding_manifest(spec: ProjectSpec, username: str) -> Manifest:
    """The RoleBinding that gives the portal (`username`) its rights in the project namespace;
    subject kind User with the full username, which also names a ServiceAccount."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {
            "name": WORKLOADS_ROLE,
            "namespace": spec.namespace,
            "labels": project_labels(spec.team_slug, spec.project_slug),
        },
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": WORKLOADS_ROLE,
        },
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": username}],
    }


def quota_resource_name(name: str) -> str:
    """The ResourceQuota key for a portal quota resource.

    Kubernetes counts extended resources (anything with a domain, like `nvidia.com/gpu`) only
    under the `requests.` prefix, so a bare name gets it and `limits.` is refused.
    """
    if name in _STANDARD_QUOTA_NAMES or name.startswith("count/"):
        return name
    if name.startswith("limits."):
        if "/" in name:
            raise ValueError(f"quota {name!r}: extended resources only support requests.")
        return name
    if name.startswith("requests."):
        return name
    if "/" in name:
        return f"requests.{name}"
    raise ValueError(f"unknown quota resource {name!r}")


def quota_hard(quota: Mapping[str, int | str]) -> dict[str, str]:
    """The `spec.hard` map: normalised names and quantities as strings."""
    hard: dict[str, str] = {}
    for name, amount in quota.items():
        key = quota_resource_name(name)
        if key in hard:
            raise ValueError(f"quota names {key!r} twice")
        hard[key] = str(amount)
    return hard


def resource_quota_manifest(spec: ProjectSpec) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {
            "name": QUOTA_NAME,
            "namespace": spec.namespace,
            "labels": project_labels(spec.team_slug, spec.project_slug),
        },
        "spec": {"hard": quota_hard(spec.quota)},
    }


def limit_range_limits(limit_range: LimitRangeSpec) -> list[dict[str, Any]]:
    item: dict[str, Any] = {"type": "Container"}
    if limit_range.default_limits:
        item["default"] = dict(limit_range.default_limits)
    if limit_range.default_requests:
        item["defaultRequest"] = dict(limit_range.default_requests)
    if limit_range.max_limits:
        item["max"] = dict(limit_range.max_limits)
    return [item]


def limit_range_manifest(spec: ProjectSpec) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": {
            "name": LIMIT_RANGE_NAME,
            "namespace": spec.namespace,
            "labels": project_labels(spec.team_slug, spec.project_slug),
        },
        "spec": {"limits": limit_range_limits(spec.limit_range)},
    }


def priority_class_manifest(spec: PrioritySpec) -> Manifest:
    body: Manifest = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": spec.name, "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE}},
        "value": spec.value,
        "preemptionPolicy": spec.preemption_policy,
        "globalDefault": False,
    }
    if spec.description:
        body["description"] = spec.description
    return body


def claim_manifest(data: ProjectDataSpec, claim: VolumeClaimSpec) -> Manifest:
    """A PersistentVolumeClaim of the project (its workspace or a home volume)."""
    spec: dict[str, Any] = {
        "accessModes": [claim.access_mode],
        "resources": {"requests": {"storage": f"{claim.size_gib}Gi"}},
    }
    if claim.storage_class:
        spec["storageClassName"] = claim.storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": claim.name,
            "namespace": data.namespace,
            "labels": project_labels(data.team_slug, data.project_slug),
        },
        "spec": spec,
    }


def secret_manifest(data: ProjectDataSpec, secret: SecretSpec) -> Manifest:
    """A Secret of the project, its values as `stringData` (the API stores them encoded)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": secret.name,
            "namespace": data.namespace,
            "labels": project_labels(data.team_slug, data.project_slug),
            "annotations": {REVISION_ANNOTATION: str(secret.revision)},
        },
        "type": secret.type,
        "stringData": dict(secret.data),
    }


def _network_policy(spec: ProjectSpec, name: str, policy: dict[str, Any]) -> Manifest:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": name,
            "namespace": spec.namespace,
            "labels": project_labels(spec.team_slug, spec.project_slug),
        },
        "spec": {**policy, "policyTypes": ["Ingress"]},
    }


def network_policy_manifests(spec: ProjectSpec) -> list[Manifest]:
    """What may reach the project's pods: nothing by default (pods of other projects included);
    the portal's workloads from pods of the ingress controller's namespace; a gang's ranks from
    each other (torchrun and NCCL talk on many ports). Egress is not limited."""
    workloads = {"matchLabels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE}}
    ranks = {"matchExpressions": [{"key": GANG_SIZE_LABEL, "operator": "Exists"}]}
    policies = [
        _network_policy(spec, DENY_POLICY_NAME, {"podSelector": {}}),
        _network_policy(
            spec,
            GANG_POLICY_NAME,
            {"podSelector": ranks, "ingress": [{"from": [{"podSelector": ranks}]}]},
        ),
    ]
    if spec.ingress_namespace:
        controller = {"matchLabels": {NAMESPACE_NAME_LABEL: spec.ingress_namespace}}
        policies.append(
            _network_policy(
                spec,
                INGRESS_POLICY_NAME,
                {
                    "podSelector": workloads,
                    "ingress": [{"from": [{"namespaceSelector": controller}]}],
                },
            )
        )
    return policies
