"""The kubernetes backend's project data: PersistentVolumeClaims and Secrets, mixed into
`KubernetesClusterBackend`.

Secret values pass through here on their way to the API server and are never logged: only
names, kinds and revisions are.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from runtime.cluster import project_manifests
from runtime.cluster.base import ClusterError, PermanentClusterError
from runtime.cluster.kubernetes_client import KubernetesApi
from runtime.cluster.names import MANAGED_BY_LABEL, MANAGED_BY_VALUE, REVISION_ANNOTATION
from runtime.cluster.quantities import quantity
from runtime.cluster.specs import ProjectDataSpec

log = logging.getLogger(__name__)

DATA_KINDS = ("PersistentVolumeClaim", "Secret")


def _metadata_of(obj: Any) -> Any:
    return getattr(obj, "metadata", None)


class KubernetesProjectData(KubernetesApi):
    """A project's claims and Secrets."""

    def ensure_project_data(self, spec: ProjectDataSpec) -> None:
        """Create each claim and Secret; grow a bound claim asked bigger (its storage class
        must allow expansion) and replace a Secret whose revision is older. A same-named object
        the portal did not make is a permanent error, never taken over."""
        for claim in spec.claims:
            body = project_manifests.claim_manifest(spec, claim)
            existing: Any = self._create_or_read(
                self.core.create_namespaced_persistent_volume_claim,
                self.core.read_namespaced_persistent_volume_claim,
                body,
            )
            if existing is None:
                log.info("created claim %s/%s (%s GiB)", spec.namespace, claim.name, claim.size_gib)
                continue
            self._check_ours(existing, "PersistentVolumeClaim", spec.namespace, claim.name)
            requests = (existing.spec.resources.requests or {}) if existing.spec else {}
            have = quantity(str(requests.get("storage", "0")))
            want = body["spec"]["resources"]["requests"]["storage"]
            phase = existing.status.phase if existing.status else None
            if have < quantity(want) and phase != "Bound":
                # Only a bound claim may grow; a later sync grows it once it is bound.
                log.info("claim %s/%s is %s: grows once bound", spec.namespace, claim.name, phase)
            elif have < quantity(want):
                self._write(
                    self.core.patch_namespaced_persistent_volume_claim,
                    claim.name,
                    spec.namespace,
                    {"spec": {"resources": {"requests": {"storage": want}}}},
                    _content_type="application/merge-patch+json",
                )
                log.info("grew claim %s/%s to %s", spec.namespace, claim.name, want)
        for secret in spec.secrets:
            body = project_manifests.secret_manifest(spec, secret)
            existing = self._create_or_read(
                self.core.create_namespaced_secret, self._read_secret_metadata, body
            )
            if existing is None:
                log.info("created secret %s/%s r%s", spec.namespace, secret.name, secret.revision)
                continue
            self._check_ours(existing, "Secret", spec.namespace, secret.name)
            annotations = existing.metadata.annotations or {}
            if annotations.get(REVISION_ANNOTATION) == str(secret.revision):
                continue
            body["metadata"]["resourceVersion"] = existing.metadata.resource_version
            self._write(self.core.replace_namespaced_secret, secret.name, spec.namespace, body)
            log.info("replaced secret %s/%s with r%s", spec.namespace, secret.name, secret.revision)

    @staticmethod
    def _check_ours(existing: Any, kind: str, namespace: str, name: str) -> None:
        labels = getattr(_metadata_of(existing), "labels", None) or {}
        if labels.get(MANAGED_BY_LABEL) != MANAGED_BY_VALUE:
            raise PermanentClusterError(
                f"{kind} {namespace}/{name} exists and is not managed by the portal; "
                "rename or remove it",
                status=409,
                reason="AlreadyExists",
            )

    def remove_project_data(self, namespace: str, kind: str, names: Sequence[str]) -> None:
        """Delete the portal's named claims or Secrets; one already gone counts as done. A
        claim still mounted is deleted by the cluster once its last pod ends."""
        if kind not in DATA_KINDS:
            raise ValueError(f"cannot remove {kind}s")
        delete = (
            self.core.delete_namespaced_secret
            if kind == "Secret"
            else self.core.delete_namespaced_persistent_volume_claim
        )
        for name in names:
            try:
                self._write(delete, name, namespace)
            except ClusterError as exc:
                if exc.status != 404:
                    raise
            log.info("deleted %s %s/%s", kind, namespace, name)
