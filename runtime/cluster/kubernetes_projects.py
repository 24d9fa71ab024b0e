"""The kubernetes backend's cluster-wide and per-project objects: the portal's PriorityClasses,
and each project's namespace, the RoleBinding that gives the portal its rights there, its
ResourceQuota and LimitRange, adopted and converged."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes import client as k8s

from runtime.cluster import project_manifests
from runtime.cluster.base import ClusterError, PermanentClusterError, TransientClusterError
from runtime.cluster.kubernetes_client import KubernetesApi, labels_of
from runtime.cluster.names import MANAGED_BY_LABEL, MANAGED_BY_VALUE
from runtime.cluster.quantities import quantity
from runtime.cluster.specs import PrioritySpec, ProjectSpec

log = logging.getLogger(__name__)

# How long a new RoleBinding may take to reach the API server's authorizer before the set-up
# is retried later (it takes milliseconds on a healthy control plane).
BINDING_WAIT_SECONDS = 10.0


def _same_quantities(have: Mapping[str, Any] | None, want: Mapping[str, str]) -> bool:
    have = have or {}
    if set(have) != set(want):
        return False
    try:
        return all(quantity(str(have[k])) == quantity(want[k]) for k in want)
    except ValueError:
        return False


def _resource_version(obj: Any) -> str | None:
    return obj.metadata.resource_version if obj.metadata is not None else None


class KubernetesProjects(KubernetesApi):
    """PriorityClasses and project namespaces with their quota and limit range."""

    def ensure_priority_classes(self, specs: Sequence[PrioritySpec]) -> None:
        """Create the classes; converge one whose value or policy drifted by re-creating it.

        Both fields are immutable, so drift means delete-and-create; only classes carrying the
        portal's label are touched, a same-named foreign class is a permanent error. Running
        pods keep their resolved priority through the gap.
        """
        for spec in specs:
            body = project_manifests.priority_class_manifest(spec)
            existing = self._create_or_read(
                self.scheduling.create_priority_class, self.scheduling.read_priority_class, body
            )
            if existing is None:
                continue
            if existing.value == spec.value and existing.preemption_policy in (
                None,
                spec.preemption_policy,
            ):
                continue
            if labels_of(existing).get(MANAGED_BY_LABEL) != MANAGED_BY_VALUE:
                raise PermanentClusterError(
                    f"PriorityClass {spec.name} exists with value {existing.value} and is not "
                    "managed by the portal; rename the portal's class or remove it",
                    status=409,
                    reason="AlreadyExists",
                )
            log.info(
                "re-creating PriorityClass %s: value %s → %s", spec.name, existing.value, spec.value
            )
            self._write(self.scheduling.delete_priority_class, spec.name)
            self._write(self.scheduling.create_priority_class, body)

    def ensure_project(self, spec: ProjectSpec) -> None:
        """Namespace, NetworkPolicies, ResourceQuota and LimitRange for a project; adopts and
        converges."""
        # 1. The namespace: adopt an existing one by adding the portal's labels.
        ns_body = project_manifests.namespace_manifest(spec)
        namespace = self._create_or_read(
            self.core.create_namespace, self.core.read_namespace, ns_body
        )
        if namespace is not None:
            if namespace.status is not None and namespace.status.phase == "Terminating":
                raise TransientClusterError(
                    f"namespace {spec.namespace} is being deleted", reason="NamespaceTerminating"
                )
            have = labels_of(namespace)
            # Ownership labels are ours to set; a Pod Security level an admin chose stays.
            want = {
                k: v
                for k, v in ns_body["metadata"]["labels"].items()
                if k != project_manifests.POD_SECURITY_LABEL or k not in have
            }
            if any(have.get(k) != v for k, v in want.items()):
                patch = {"metadata": {"labels": want}}
                self._write(
                    self.core.patch_namespace,
                    spec.namespace,
                    patch,
                    _content_type="application/merge-patch+json",
                )
        # 2. The portal's own rights in it (RoleBinding gpu-portal-workloads).
        self._ensure_workloads_binding(spec)
        # 3. Who may reach its pods: the NetworkPolicies, patched back when they drifted.
        for policy_body in project_manifests.network_policy_manifests(spec):
            policy = self._create_or_read(
                self.networking.create_namespaced_network_policy,
                self.networking.read_namespaced_network_policy,
                policy_body,
            )
            if policy is not None and (
                self.api_client.sanitize_for_serialization(policy.spec) != policy_body["spec"]
            ):
                self._write(
                    self.networking.patch_namespaced_network_policy,
                    policy_body["metadata"]["name"],
                    spec.namespace,
                    {"spec": policy_body["spec"]},
                    _content_type="application/merge-patch+json",
                )
        # 4. The quota: replace it when its hard limits differ from the portal's.
        quota_body = project_manifests.resource_quota_manifest(spec)
        quota = self._create_or_read(
            self.core.create_namespaced_resource_quota,
            self.core.read_namespaced_resource_quota,
            quota_body,
        )
        if quota is not None and not _same_quantities(
            quota.spec.hard if quota.spec else None, quota_body["spec"]["hard"]
        ):
            quota_body["metadata"]["resourceVersion"] = _resource_version(quota)
            self._write(
                self.core.replace_namespaced_resource_quota,
                project_manifests.QUOTA_NAME,
                spec.namespace,
                quota_body,
            )
        # 5. The limit range: the same, or gone when the project has no defaults.
        if spec.limit_range.is_empty:
            try:
                self._write(
                    self.core.delete_namespaced_limit_range,
                    project_manifests.LIMIT_RANGE_NAME,
                    spec.namespace,
                )
            except ClusterError as exc:
                if exc.status != 404:
                    raise
            return
        limits_body = project_manifests.limit_range_manifest(spec)
        limit_range = self._create_or_read(
            self.core.create_namespaced_limit_range,
            self.core.read_namespaced_limit_range,
            limits_body,
        )
        if limit_range is not None and not self._same_limits(
            limit_range, limits_body["spec"]["limits"]
        ):
            limits_body["metadata"]["resourceVersion"] = _resource_version(limit_range)
            self._write(
                self.core.replace_namespaced_limit_range,
                project_manifests.LIMIT_RANGE_NAME,
                spec.namespace,
                limits_body,
            )

    def _ensure_workloads_binding(self, spec: ProjectSpec) -> None:
        """Bind the ClusterRole gpu-portal-workloads to the portal in the namespace, and wait
        until the API server applies it (its authorizer learns of bindings through a watch).

        Where the binding cannot be made (403) but the portal already holds the rights another
        way (an administrator's own RoleBinding or ClusterRoleBinding), that is enough.
        """
        username = self.portal_username()
        body = project_manifests.workloads_role_binding_manifest(spec, username)
        try:
            existing = self._create_or_read(
                self.rbac.create_namespaced_role_binding,
                self.rbac.read_namespaced_role_binding,
                body,
            )
        except ClusterError as exc:
            if exc.status == 403 and self._holds_workload_rights(spec.namespace):
                log.info("no RoleBinding in %s, the portal has its rights already", spec.namespace)
                return
            raise
        if existing is not None:
            if any(s.kind == "User" and s.name == username for s in existing.subjects or []):
                return
            self._write(
                self.rbac.patch_namespaced_role_binding,
                project_manifests.WORKLOADS_ROLE,
                spec.namespace,
                {"subjects": body["subjects"]},
                _content_type="application/merge-patch+json",
            )
        deadline = time.monotonic() + BINDING_WAIT_SECONDS
        while not self._holds_workload_rights(spec.namespace):
            if time.monotonic() > deadline:
                raise TransientClusterError(
                    f"the portal's RoleBinding in {spec.namespace} is not in effect yet",
                    reason="BindingPending",
                )
            time.sleep(0.05)

    def _holds_workload_rights(self, namespace: str) -> bool:
        """The first right the namespace's set-up needs after the binding."""
        return self.may("create", "resourcequotas", namespace)

    def _same_limits(self, existing: k8s.V1LimitRange, want: list[dict[str, Any]]) -> bool:
        have = self.api_client.sanitize_for_serialization(
            (existing.spec.limits if existing.spec else None) or []
        )
        if len(have) != len(want):
            return False
        for have_item, want_item in zip(have, want, strict=True):
            if have_item.get("type") != want_item.get("type"):
                return False
            for key in ("default", "defaultRequest", "max"):
                if not _same_quantities(have_item.get(key), want_item.get(key, {})):
                    return False
        return True
